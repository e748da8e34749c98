"""`NeighborLoader`: seed nodes → sampled mini-batches in PyG NeighborLoader's layout.

A plain Python iterator (no worker processes): each batch is one fused-kernel sample, one
`index_select` per attribute and one `Data` build. Epochs are reproducible: the shuffle order of
epoch e and the sampling seed of its batch i derive from `(seed, e[, i])` only, by the one rule
of `app.loader.epochs.EpochBatching`, which the distributed loaders hold too.

`threads=n` samples up to `2n` batches ahead in `n` threads (the kernels and gathers release
the GIL), still yielding them in order: what feeds a GPU trainer while it computes. With the
torch sampler each thread builds on a CUDA stream of its own (`SideStreams`), so the sampler's
read-backs do not wait for the step. A batch depends on its seed only, so the batches are the
same whatever `threads` is. `features` serve node attributes from a device copy or cache
(`DeviceFeatures`; its hit rate is logged per epoch).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import NodeSamplerInput

from app.loader.batch import LocalGather
from app.loader.device_features import DeviceFeatures
from app.loader.epochs import EpochBatching
from app.loader.streams import SideStreams
from app.sampler.buffers import BufferPool
from app.sampler.neighbor import NeighborSampler


class LocalLoader:
    """What the local loaders share: the epoch counter, the batching rule (`EpochBatching`)
    and the `TrainLoader` methods that have nothing to do here (no remote traffic, nothing to
    release, nothing sampled ahead of `iter()`)."""

    epoch: int
    batching: EpochBatching

    @property
    def num_inputs(self) -> int:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.batching.num_batches(self.num_inputs)

    def epoch_jobs(self) -> Iterator[tuple[Tensor, int]]:
        """(input positions, sampling seed) of every batch of the next epoch, which starts."""
        epoch, self.epoch = self.epoch, self.epoch + 1
        b = self.batching
        for i, index in enumerate(b.indices(self.num_inputs, epoch)):
            yield index, b.batch_seed(epoch, i)

    def prefetch(self) -> None:
        """Nothing to start: batches are sampled when the epoch asks for them."""

    def data_stats(self) -> dict[str, float]:
        """Nothing remote is fetched."""
        return {}

    def close(self) -> None:
        """Holds nothing to release (the threads of `threads=n` end with their epoch)."""


def _to_index(nodes, num_nodes: int, what: str) -> tuple[Tensor, Tensor | None]:
    """(node ids, input ids): a bool mask gives its true positions (input id = node id)."""
    if nodes is None:
        return torch.arange(num_nodes), None
    nodes = torch.as_tensor(nodes)
    if nodes.dtype == torch.bool:
        if nodes.numel() != num_nodes:
            raise ValueError(f"{what} mask has {nodes.numel()} entries but there are {num_nodes}")
        ids = nodes.nonzero().view(-1)
        return ids, ids
    nodes = nodes.long().view(-1)
    if nodes.numel() and (int(nodes.min()) < 0 or int(nodes.max()) >= num_nodes):
        raise ValueError(
            f"{what} holds ids in [{int(nodes.min())}, {int(nodes.max())}] but there are "
            f"{num_nodes} nodes"
        )
    return nodes, None


def resolve_input_nodes(
    data: Data | HeteroData, input_nodes
) -> tuple[str | None, Tensor, Tensor | None]:
    """(input node type or None, seed node ids, input ids or None) from NeighborLoader's forms:
    None | ids | bool mask for Data; "type" | (type, None | ids | mask) for HeteroData."""
    if isinstance(data, Data):
        return None, *_to_index(input_nodes, data.num_nodes, "input_nodes")
    if isinstance(input_nodes, str):
        input_nodes = (input_nodes, None)
    if not (isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2):
        raise ValueError(
            f"input_nodes for HeteroData must be a node type or (node_type, ids) "
            f"(got {input_nodes!r})"
        )
    ntype, nodes = input_nodes
    if ntype not in data.node_types:
        raise ValueError(f"input node type {ntype!r} is not one of {data.node_types}")
    return ntype, *_to_index(nodes, data[ntype].num_nodes, f"input_nodes[{ntype!r}]")


class NeighborLoader(LocalLoader):
    """Mini-batches of sampled neighbourhoods around seed nodes (PyG NeighborLoader's layout)."""

    def __init__(
        self,
        data: Data | HeteroData,
        num_neighbors,
        input_nodes=None,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        replace: bool = False,
        subgraph_type: str = "directional",
        disjoint: bool = False,
        time_attr: str | None = None,
        input_time: Tensor | None = None,
        temporal_strategy: str = "uniform",
        seed: int = 0,
        sampler: NeighborSampler | None = None,
        threads: int = 0,
        pin_memory: bool = False,
        features: dict[str, DeviceFeatures] | None = None,
    ) -> None:
        self.data, self.threads, self.pin_memory = data, int(threads), pin_memory
        self.sampler = sampler or NeighborSampler(
            data,
            num_neighbors,
            replace=replace,
            subgraph_type=subgraph_type,
            disjoint=disjoint,
            time_attr=time_attr,
            temporal_strategy=temporal_strategy,
            seed=seed,
        )
        self.input_type, self.nodes, self.input_id = resolve_input_nodes(data, input_nodes)
        if time_attr is not None and input_time is None:
            store = data if self.input_type is None else data[self.input_type]
            input_time = store[time_attr][self.nodes]
        if input_time is not None and input_time.numel() != self.nodes.numel():
            raise ValueError(
                f"input_time has {input_time.numel()} entries for {self.nodes.numel()} input nodes"
            )
        self.input_time = input_time
        self.batching = EpochBatching(batch_size, shuffle, drop_last, seed)
        # batches sampled ahead (2 per thread), the one yielded and the one its consumer holds
        self.gather = LocalGather(data, features, BufferPool(2 * self.threads + 2))
        tensors = self.sampler.tensors  # the torch sampler's CSC, None for the numba kernel
        self.streams = None if tensors is None else SideStreams(tensors.device)
        self.epoch = 0

    @property
    def num_inputs(self) -> int:
        return self.nodes.numel()

    def __iter__(self) -> Iterator[Data | HeteroData]:
        jobs = self.epoch_jobs()
        if self.threads <= 0:
            yield from (self._batch(*job) for job in jobs)
        elif self.streams is None:
            yield from in_threads(self._batch, jobs, self.threads)
        else:
            build, streams = self._batch, self.streams
            jobs_on_streams = ((build, *job) for job in jobs)
            built = in_threads(streams.build, jobs_on_streams, self.threads)
            yield from (streams.hand_over(b) for b in built)
        for key, rows in self.gather.features.items():
            rows.log_hit_rate(f"epoch {self.epoch - 1}: {key} cache")

    def _batch(self, index: Tensor, seed: int) -> Data | HeteroData:
        batch = self.collate(index, seed)
        return batch.pin_memory() if self.pin_memory else batch

    def sampler_input(self, index: Tensor) -> NodeSamplerInput:
        """The sampler input of the batch holding input positions `index`."""
        return NodeSamplerInput(
            input_id=index if self.input_id is None else self.input_id[index],
            node=self.nodes[index],
            time=None if self.input_time is None else self.input_time[index],
            input_type=self.input_type,
        )

    def collate(self, index: Tensor, seed: int | None = None) -> Data | HeteroData:
        """Sample and build one mini-batch from input positions `index`."""
        out = self.sampler.sample_from_nodes(self.sampler_input(index), seed=seed)
        return self.gather.to_batch(out, self.input_type)


def in_threads(fn: Callable, jobs: Iterable[tuple], threads: int) -> Iterator:
    """`fn(*job)` for each job, computed by `threads` threads at most `2 * threads` jobs
    ahead, yielded in order; closing the iterator early cancels what has not started."""
    pool = ThreadPoolExecutor(threads, thread_name_prefix="sampler")
    pending: deque[Future] = deque()
    try:
        for job in jobs:
            pending.append(pool.submit(fn, *job))
            if len(pending) >= 2 * threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
