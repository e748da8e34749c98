"""PyG's `DistLoader`, `DistNeighborLoader`, `DistLinkNeighborLoader` over the engine.

Each translates PyG's keywords into the engine's records once (`SamplerOptions` inside the
sampler it builds, `EpochBatching`, `NodeInputs` / `LinkInputs`, a feeding mode) and then is a
`BatchEngine`. What only PyG's scripts need lives here: joining the RPC group on construction
(as the launcher's process, or, with a context of PyG's five fields, as a hand-launched
trainer that starts its own `num_workers` sampler processes: `workers.join`; the last loader
closed stops them and leaves RPC), PyG's `channel`, `dist_sampler` and
`enable_multithreading`, and one line for every argument that cannot be honoured.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.sampler import NegativeSampling

from app.config import SamplerConfig
from app.distributed import rpc, server, workers
from app.distributed.context import DistContext
from app.distributed.engine import BatchEngine
from app.distributed.feeding import SamplerProcesses, feeding_for
from app.distributed.graph_store import GraphStoreCore
from app.distributed.group import DEFAULT_RPC_THREADS, trainer_router
from app.distributed.inputs import EdgeType, Inputs, LinkInputs, NodeInputs
from app.distributed.pyg.feature_store import LocalFeatureStore
from app.distributed.pyg.graph_store import LocalGraphStore
from app.distributed.pyg.sampler import DistNeighborSampler
from app.loader.epochs import EpochBatching
from app.partition.reader import load_partition

Stores = tuple[LocalFeatureStore, LocalGraphStore]
log = logging.getLogger("distgnn")


class _Channel:
    """What PyG's tests ask of a loader's channel after an epoch: is anything still pending."""

    def __init__(self, loader: BatchEngine) -> None:
        self._loader = loader

    def empty(self) -> bool:
        return not self._loader.in_flight()


class DistLoader(BatchEngine):
    """PyG's loader base: its positional order (`current_ctx, master_addr, master_port,
    channel, num_rpc_threads, rpc_timeout, dist_sampler`), the rest by keyword. With a
    context built from PyG's five fields (a hand-launched script), the loader derives the RPC
    identity (`DistContext.for_partition`), starts its own `num_workers` sampler processes and
    stops them when closed (`close`, garbage collection or interpreter exit; `with loader as it:`
    iterates one epoch and leaves the loader open, as PyG's).
    Arguments PyG has and this loader cannot honour are refused with one line. Subclasses say
    what the inputs are (`_inputs`).
    """

    def __init__(
        self,
        current_ctx: DistContext | None = None,
        master_addr: str | None = "127.0.0.1",
        master_port: int | str | None = None,
        channel: Any = None,
        num_rpc_threads: int | None = None,
        rpc_timeout: float = 180.0,
        dist_sampler: DistNeighborSampler | None = None,
        *,
        data: Stores | str | Path,
        num_neighbors: Any = None,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        num_workers: int = 0,
        concurrency: int = 1,
        replace: bool = False,
        subgraph_type: str = "directional",
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        time_attr: str | None = None,
        init_timeout: float = 120.0,
        seed: int = 0,
        transform: Callable | None = None,
        attrs: list[str] | None = None,
        feature_cache_size: int = SamplerConfig.feature_cache_size,
        hot_cache_bytes: int = SamplerConfig.hot_cache_bytes,
        feature_wire_dtype: str = SamplerConfig.feature_wire_dtype,
        async_sampling: bool = True,
        device: Any = None,
        filter_per_worker: bool | None = False,
        rpc_worker_names: Any = None,
        **unknown: Any,
    ) -> None:
        if not num_workers and not unknown.get("persistent_workers", True):
            del unknown["persistent_workers"]  # no sampler process: nothing persists (PyG's)
        _refuse(unknown, channel, rpc_worker_names, dist_sampler)
        if concurrency <= 0 or num_workers < 0 or feature_cache_size < 0 or hot_cache_bytes < 0:
            raise ValueError(
                f"concurrency={concurrency}, num_workers={num_workers}, feature_cache_size="
                f"{feature_cache_size}, hot_cache_bytes={hot_cache_bytes}: need concurrency > 0, "
                "num_workers >= 0, feature_cache_size >= 0 and hot_cache_bytes >= 0 (0: off)"
            )
        if num_workers and current_ctx is None:
            raise ValueError(f"num_workers={num_workers} needs current_ctx (sampler processes)")
        batching = EpochBatching(batch_size, shuffle, drop_last, seed)
        stores = _stores(data, current_ctx)
        gs = stores[1]
        self.ctx = current_ctx
        if current_ctx is not None:  # PyG's five fields → our RPC identity (no-op if derived)
            self.ctx = current_ctx.for_partition(gs.num_partitions, gs.partition_idx, num_workers)
        router = None if self.ctx is None else trainer_router(self.ctx, gs.num_partitions)
        sampler = dist_sampler or DistNeighborSampler(
            self.ctx,
            stores,
            num_neighbors=num_neighbors,
            replace=replace,
            subgraph_type=subgraph_type,
            disjoint=disjoint,
            temporal_strategy=temporal_strategy,
            time_attr=time_attr,
            router=router,
            attrs=attrs,
            feature_cache_size=feature_cache_size,
            hot_cache_bytes=hot_cache_bytes,
            feature_wire_dtype=feature_wire_dtype,
        )
        inputs = self._inputs(sampler)  # refused before any process starts
        self.dist_sampler = sampler  # PyG's name of the sampler
        self.num_workers, self.filter_per_worker = num_workers, filter_per_worker
        group = self._join(
            current_ctx,
            stores,
            router,
            (master_addr, master_port),
            (rpc_timeout, init_timeout),
            num_rpc_threads,
        )
        self._left = weakref.finalize(self, workers.leave, group)
        self._iterator: Generator[Any, None, None] | None = None  # `with loader as it:`
        to = None if device is None else torch.device(device)
        feeding = feeding_for(self.ctx, num_workers, concurrency, rpc_timeout)
        super().__init__(sampler, inputs, batching, feeding, to, transform, async_sampling)

    def _inputs(self, sampler: DistNeighborSampler) -> Inputs:
        raise TypeError(
            "DistLoader is the base of DistNeighborLoader and DistLinkNeighborLoader: use one"
        )

    def _join(
        self,
        given: DistContext | None,
        stores: Stores,
        router: rpc.RPCRouter | None,
        address: tuple[str | None, Any],
        timeouts: tuple[float, float],
        threads: int | None,
    ) -> workers.Group | None:
        """Join the RPC group: as the launcher's process, or (PyG's five fields) as a
        hand-launched trainer that starts its own sampler processes."""
        if given is None or self.ctx is None:
            return None
        if self.num_workers == 0:  # this trainer is the process that serves its partition
            server.register(*stores, router)
        master_addr, master_port = address
        if master_port is None or master_addr is None:
            raise ValueError(
                f"master_addr={master_addr!r}, master_port={master_port!r}: both are required "
                "with current_ctx (the address and port of the RPC group's master)"
            )
        rpc_timeout, init_timeout = timeouts
        threads = threads or DEFAULT_RPC_THREADS
        if given.is_derived:  # the launcher (or the caller) owns RPC and the sampler processes
            rpc.init_rpc(
                self.ctx,
                master_addr,
                int(master_port),
                threads,
                timeout_s=rpc_timeout,
                init_timeout_s=init_timeout,
            )
            return None
        root = None if stores[1].root is None else str(stores[1].root)
        return workers.join(
            self.ctx,
            root,
            master_addr,
            int(master_port),
            rpc_timeout,
            init_timeout,
            threads,
            stores[0].tensors_put(),  # the script's put_tensor calls, for its sampler processes
        )

    @property
    def channel(self) -> _Channel:
        """PyG's message channel, read-only: `empty()` says no batch is in flight (batches come
        back by RPC / shared memory here, so there is no queue to pass in)."""
        return _Channel(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(pid={os.getpid()})"

    def close(self) -> None:
        """Release this loader: its threads, its shared-memory ring's files, and its share of
        the RPC group it formed (the last loader out stops the sampler processes and leaves
        RPC). Under the launcher, RPC stays up for other loaders (see `workers.shutdown`)."""
        super().close()
        self._left()

    def __enter__(self) -> Iterator[Any]:
        """PyG's: an iterator over a new epoch (`with loader as it: batch = next(it)`, e.g. to
        initialise a model's lazy parameters). The loader stays open: leaving the block drops
        that iterator and collects its batches still in flight, and the next epoch starts
        afresh (PyG's `__exit__` also waits for every rank; a script wanting that calls
        `torch.distributed.barrier()`). `close()` releases the loader."""
        self._iterator = iter(self)
        return self._iterator

    def __exit__(self, *_: Any) -> None:
        it, self._iterator = self._iterator, None
        if it is not None:
            it.close()

    @contextmanager
    def enable_multithreading(self, num_threads: int | None = None) -> Iterator[None]:
        """PyG's: use `num_threads` torch threads in each sampler process while in the block
        (default: the cores of this machine divided among them); needs num_workers > 0."""
        feeding = self.feeding
        if not isinstance(feeding, SamplerProcesses):
            raise ValueError(
                "enable_multithreading needs sampler processes: pass num_workers > 0 "
                "(with num_workers=0 the trainer samples on `concurrency` threads)"
            )
        if num_threads is None:
            num_threads = max(1, (os.cpu_count() or 1) // len(feeding.workers))
        if num_threads <= 0:
            raise ValueError(f"num_threads={num_threads}: pass a positive count")
        _set_threads(feeding, num_threads)
        try:
            yield
        finally:
            _set_threads(feeding, 1)


def _set_threads(feeding: SamplerProcesses, num_threads: int) -> None:
    calls = [rpc.call_async(w, workers.set_threads, (num_threads,)) for w in feeding.workers]
    for call in calls:
        call.wait()


def _stores(data: Stores | str | Path, ctx: DistContext | None) -> Stores:
    if isinstance(data, (str, Path)):
        part = load_partition(data, ctx.partition_idx if ctx is not None else 0)
        return LocalFeatureStore.from_partition_data(part), LocalGraphStore.from_partition_data(
            part
        )
    if not (isinstance(data, tuple) and len(data) == 2):
        raise ValueError("data must be (LocalFeatureStore, LocalGraphStore) or a partition root")
    return data


_PYG_ONLY = {  # PyG / DataLoader arguments with no meaning here, and why
    "collate_fn": "batches are built by the sampler",
    "worker_init_fn": "sampler processes are started by the loader (see workers.join)",
    "prefetch_factor": "pass concurrency=... (batches in flight)",
    "is_sorted": "partitions are stored sorted (CSC)",
    "directed": "use subgraph_type='directional'",
}


# DataLoader arguments PyG's examples pass: accepted where they describe what happens here,
# one warning line where they ask for what cannot happen (never silently dropped).
_ACCEPTED = {
    "persistent_workers": (True, "sampler processes persist until close() whatever this says"),
    "pin_memory": (False, "batches are not pinned; pass device=... to move them"),
}


def _refuse(unknown: dict[str, Any], channel: Any, worker_names: Any, dist_sampler: Any) -> None:
    """One line for every argument this loader cannot honour (never silently ignored)."""
    for name, (meant, why) in _ACCEPTED.items():
        if name in unknown and bool(unknown.pop(name)) != meant:
            log.warning("%s=%s has no effect: %s", name, not meant, why)
    for name in unknown:
        why = _PYG_ONLY.get(name, "not an argument of PyG's distributed loaders or of this one")
        raise TypeError(f"{name}={unknown[name]!r} is not supported: {why}")
    if channel is not None:
        raise ValueError("channel: batches come back by RPC / shared memory; pass channel=None")
    if worker_names:
        raise ValueError(
            f"rpc_worker_names={worker_names!r}: RPC names are derived from the DistContext; "
            "pass {} or None"
        )
    if dist_sampler is not None and not isinstance(dist_sampler, DistNeighborSampler):
        raise TypeError(f"dist_sampler: expected a DistNeighborSampler, got {type(dist_sampler)}")


class DistNeighborLoader(DistLoader):
    """Batches of seed nodes → sampled subgraphs (Data / HeteroData, NeighborLoader layout).

    `input_nodes`: global ids (Tensor), `(node_type, ids)`, a node type (all its nodes), or
    None for every node this partition owns. `input_time` (temporal sampling, `time_attr`
    set): one time per input node, by default the input nodes' own times. Other arguments:
    see `DistLoader` (PyG's names).
    """

    def __init__(
        self,
        data: Stores | str | Path,
        num_neighbors: Any,
        master_addr: str | None = "127.0.0.1",
        master_port: int | str | None = None,
        current_ctx: DistContext | None = None,
        input_nodes: Any = None,
        input_time: Tensor | None = None,
        dist_sampler: DistNeighborSampler | None = None,
        replace: bool = False,
        subgraph_type: str = "directional",
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        time_attr: str | None = None,
        transform: Callable | None = None,
        concurrency: int = 1,
        num_rpc_threads: int | None = None,
        filter_per_worker: bool | None = False,
        async_sampling: bool = True,
        device: Any = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(input_nodes, str):  # PyG: a node type alone means all its nodes
            input_nodes = (input_nodes, None)
        self._given = (input_nodes, input_time)
        super().__init__(
            current_ctx,
            master_addr,
            master_port,
            dist_sampler=dist_sampler,
            data=data,
            num_neighbors=num_neighbors,
            replace=replace,
            subgraph_type=subgraph_type,
            disjoint=disjoint,
            temporal_strategy=temporal_strategy,
            time_attr=time_attr,
            transform=transform,
            concurrency=concurrency,
            num_rpc_threads=num_rpc_threads,
            filter_per_worker=filter_per_worker,
            async_sampling=async_sampling,
            device=device,
            **kwargs,
        )

    def _inputs(self, sampler: DistNeighborSampler) -> NodeInputs:
        input_nodes, input_time = self._given
        input_type, ids = input_nodes if isinstance(input_nodes, tuple) else (None, input_nodes)
        if sampler.graph_store.is_hetero and input_type is None:
            raise ValueError("heterogeneous graph: pass input_nodes=(node_type, ids)")
        if ids is None:
            ids = sampler.feature_store.get_global_id(input_type)
        ids = torch.as_tensor(ids, dtype=torch.int64)
        if not sampler.temporal:
            if input_time is not None:
                raise ValueError("input_time needs temporal sampling: set time_attr='time'")
        elif input_time is None:  # the input nodes' own times
            input_time = sampler.graph_store.node_time(input_type)[ids]
        else:
            input_time = torch.as_tensor(input_time)
        return NodeInputs(ids, input_type, input_time)


class DistLinkNeighborLoader(DistLoader):
    """Batches of edges (+ negatives) → subgraphs with `edge_label_index`/`edge_label` (binary)
    or `src_index`/`dst_pos_index`/`dst_neg_index` (triplet), as PyG's LinkNeighborLoader.

    `edge_label_index`: `[2, E]` global ids (homogeneous), or `(edge_type, [2, E])` on a
    heterogeneous graph (the link fields then sit on the edge / end types, as locally).
    Negatives are drawn in the trainer (`LinkInputs`). Temporal (`time_attr` and
    `edge_label_time`, one time per link, both or neither as in PyG): every endpoint is a tree
    sampled no later than its link's time (disjoint), the batch carries `edge_label_time`.
    """

    def __init__(
        self,
        data: Stores | str | Path,
        num_neighbors: Any,
        master_addr: str | None = "127.0.0.1",
        master_port: int | str | None = None,
        current_ctx: DistContext | None = None,
        edge_label_index: Tensor | tuple[Any, Tensor] | None = None,
        edge_label: Tensor | None = None,
        edge_label_time: Tensor | None = None,
        dist_sampler: DistNeighborSampler | None = None,
        replace: bool = False,
        subgraph_type: str = "directional",
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        neg_sampling: str | NegativeSampling | None = None,
        neg_sampling_ratio: float | None = None,
        time_attr: str | None = None,
        transform: Callable | None = None,
        concurrency: int = 1,
        num_rpc_threads: int | None = None,
        filter_per_worker: bool | None = False,
        async_sampling: bool = True,
        device: Any = None,
        **kwargs: Any,
    ) -> None:
        if (edge_label_time is None) != (time_attr is None):
            raise ValueError(
                f"edge_label_time is {'not ' if edge_label_time is None else ''}set while "
                f"time_attr={time_attr!r}: temporal link sampling needs both (one time per "
                "link, and the edge attribute holding edge times, e.g. 'edge_time'), else neither"
            )
        if isinstance(neg_sampling, NegativeSampling):
            neg_sampling, neg_sampling_ratio = neg_sampling.mode.value, neg_sampling.amount
        if neg_sampling not in (None, "binary", "triplet"):
            raise ValueError(f"neg_sampling={neg_sampling!r}: expected binary, triplet or None")
        ratio = 0.0 if neg_sampling is None else float(neg_sampling_ratio or 1.0)
        mode = neg_sampling or "binary"
        self._given = (edge_label_index, edge_label, edge_label_time, mode, ratio)
        super().__init__(
            current_ctx,
            master_addr,
            master_port,
            dist_sampler=dist_sampler,
            data=data,
            num_neighbors=num_neighbors,
            replace=replace,
            subgraph_type=subgraph_type,
            disjoint=disjoint,
            temporal_strategy=temporal_strategy,
            time_attr=time_attr,
            transform=transform,
            concurrency=concurrency,
            num_rpc_threads=num_rpc_threads,
            filter_per_worker=filter_per_worker,
            async_sampling=async_sampling,
            device=device,
            **kwargs,
        )

    def _inputs(self, sampler: DistNeighborSampler) -> LinkInputs:
        edge_label_index, edge_label, edge_label_time, mode, ratio = self._given
        gs = sampler.graph_store
        edge_type, edges = _links(gs, edge_label_index)
        if sampler.temporal and not sampler.edge_level and ratio:
            raise ValueError(
                f"time_attr={sampler.options.time_attr!r} (node time) with negative sampling: "
                "negatives here are not limited to nodes older than their link (PyG's rule); "
                "sample by edge time (time_attr='edge_time') or pass neg_sampling=None"
            )
        return LinkInputs(
            torch.as_tensor(edges, dtype=torch.int64),
            edge_type,
            gs.num_nodes(None if edge_type is None else edge_type[0]),
            gs.num_nodes(None if edge_type is None else edge_type[-1]),
            edge_label,
            mode,
            ratio,
            None if edge_label_time is None else torch.as_tensor(edge_label_time),
        )


def _links(gs: GraphStoreCore, edge_label_index: Any) -> tuple[EdgeType | None, Any]:
    """(edge type or None, [2, E] links) from PyG's forms; refuses a mismatch with the graph."""
    hetero = gs.is_hetero
    if isinstance(edge_label_index, tuple) and len(edge_label_index) == 2:
        head, edges = edge_label_index  # (None, ids): PyG's homogeneous form
        edge_type = None if head is None else tuple(head)
    else:
        edge_type, edges = None, edge_label_index
    if edges is None:
        raise ValueError("edge_label_index is required: [2, E] global ids, or (edge_type, ids)")
    if hetero and edge_type not in gs.edge_types:
        raise ValueError(
            f"heterogeneous graph: pass edge_label_index=(edge_type, [2, E] ids) with one "
            f"of {gs.edge_types} (got edge type {edge_type})"
        )
    if not hetero and edge_type is not None:
        raise ValueError(f"edge type {edge_type} given for a homogeneous graph: pass [2, E]")
    return edge_type, edges
