"""`DistNeighborLoader` / `DistLinkNeighborLoader`: the trainer's side of distributed sampling.

The trainer cuts its seeds into batches (shuffled per epoch with a seeded, epoch-dependent
permutation) and sends each batch to one of ITS sampler processes (`sampler<node>.<rank>.<w>`)
round-robin, keeping at most `concurrency` batches in flight: that deque of pending calls is
the bounded channel, and batches come back in order. A sampler process writes a batch's
features into a slot of this loader's shared-memory ring (`shm.BatchRing`), reused once the
trainer has dropped the batch. With `num_workers=0` the trainer samples
itself, on a pool of `concurrency` threads (the numba kernel releases the GIL, RPC waits too),
and serves its partition to peers. Every wait is bounded by the RPC timeout; a dead or silent
peer surfaces as `PeerError` naming it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.sampler import NegativeSampling

from app.config import SamplerConfig
from app.distributed import rpc, server
from app.distributed.context import DistContext
from app.distributed.feature_store import LocalFeatureStore
from app.distributed.graph_store import LocalGraphStore
from app.distributed.sampler import DistNeighborSampler
from app.distributed.shm import BatchRing
from app.runtime import worker_name
from app.sampler.kernel import derive_seed

Stores = tuple[LocalFeatureStore, LocalGraphStore]
log = logging.getLogger("distgnn")


class _Pending:
    """A batch being sampled in this process (same `wait()` contract as `rpc.PendingCall`)."""

    def __init__(self, future: Any, timeout: float) -> None:
        self.future, self.timeout = future, timeout

    def wait(self) -> Any:
        return self.future.result(timeout=self.timeout)


_LEVELS = ("cache_rows", "cache_hit_rate", "cpu_s", "minflt")  # not counters: not differenced


def _sum_stats(stats: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for s in stats for k in s}
    return {k: sum(s.get(k, 0) for s in stats) for k in keys}


class _InSlot:
    """A batch requested from a sampler process, to be written into ring slot `slot`."""

    def __init__(self, call: rpc.PendingCall, ring: BatchRing, slot: str) -> None:
        self.call, self.ring, self.slot = call, ring, slot

    def wait(self) -> Any:
        return self.call.wait()

    def attach(self, data: Any) -> Any:
        return self.ring.attach(data, self.slot)


class DistLoader:
    """Shared machinery: stores, RPC group, sampler spec, batching, the in-flight window."""

    def __init__(
        self,
        data: Stores | str | Path,
        num_neighbors: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        current_ctx: DistContext | None = None,
        num_workers: int = 0,
        concurrency: int = 1,
        replace: bool = False,
        subgraph_type: str = "directional",
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        time_attr: str | None = None,
        master_addr: str = "127.0.0.1",
        master_port: int | None = None,
        rpc_timeout: float = 60.0,
        init_timeout: float = 120.0,
        seed: int = 0,
        transform: Callable | None = None,
        attrs: list[str] | None = None,
        feature_cache_size: int = SamplerConfig.feature_cache_size,
        **_: Any,
    ) -> None:
        if batch_size <= 0 or concurrency <= 0 or num_workers < 0 or feature_cache_size < 0:
            raise ValueError(
                f"batch_size={batch_size}, concurrency={concurrency}, num_workers={num_workers}, "
                f"feature_cache_size={feature_cache_size}: need batch_size > 0, concurrency > 0, "
                "num_workers >= 0, feature_cache_size >= 0 (sampler.feature_cache_size=0: off)"
            )
        self.ctx = current_ctx
        self.feature_store, self.graph_store = self._stores(data)
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.num_workers, self.concurrency = num_workers, concurrency
        self.seed, self.epoch, self.transform = seed, 0, transform
        self.rpc_timeout = rpc_timeout
        router = None
        if current_ctx is not None and self.graph_store.num_partitions > 1:
            router = rpc.RPCRouter.for_context(current_ctx)
        self.sampler = DistNeighborSampler(
            (self.feature_store, self.graph_store), num_neighbors, replace, subgraph_type,
            disjoint, temporal_strategy, time_attr, router, attrs, feature_cache_size,
        )  # fmt: skip
        if current_ctx is not None:
            if num_workers == 0:  # this trainer is the process that serves its partition
                server.register(self.feature_store, self.graph_store, router)
            if master_port is None:
                raise ValueError("master_port is required with current_ctx (the job's RPC port)")
            rpc.init_rpc(current_ctx, master_addr, master_port, rpc_timeout, init_timeout)
        self.workers = [
            worker_name("sampler", current_ctx.partition_idx, current_ctx.local_rank, w)
            for w in range(num_workers if current_ctx is not None else 0)
        ]
        if num_workers and current_ctx is None:
            raise ValueError(f"num_workers={num_workers} needs current_ctx (sampler processes)")
        self._pool = ThreadPoolExecutor(concurrency) if not self.workers else None
        self.spec = self.sampler.spec
        # sampler processes share this node: features come back through reused /dev/shm slots
        self.ring = BatchRing() if self.workers else None
        self._next_worker = 0
        # a batch makes one round of calls per hop plus the feature fetch, each bounded by
        # rpc_timeout: waiting longer for the whole batch lets the inner error name the culprit
        self._batch_timeout = rpc_timeout * (self.sampler.num_hops + 2)

    def _stores(self, data: Stores | str | Path) -> Stores:
        if isinstance(data, (str, Path)):
            pid = self.ctx.partition_idx if self.ctx is not None else 0
            return server.load_stores(str(data), pid)
        if not (isinstance(data, tuple) and len(data) == 2):
            raise ValueError(
                "data must be (LocalFeatureStore, LocalGraphStore) or a partition root"
            )
        return data

    # -- batching -----------------------------------------------------------------------------

    def _order(self, n: int) -> Tensor:
        """This epoch's order of the n inputs (seeded, different every epoch)."""
        if not self.shuffle:
            return torch.arange(n)
        gen = torch.Generator().manual_seed(derive_seed(self.seed, self.epoch) & 0x7FFFFFFFFFFF)
        return torch.randperm(n, generator=gen)

    def _num_inputs(self) -> int:
        raise NotImplementedError

    def _submit(self, index: Tensor, batch_idx: int) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        n = self._num_inputs()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        order = self._order(self._num_inputs())
        self.epoch += 1
        batches = [order[i : i + self.batch_size] for i in range(0, order.numel(), self.batch_size)]
        if self.drop_last and batches and batches[-1].numel() < self.batch_size:
            batches.pop()
        return self._pipeline(batches, self.epoch - 1)

    def _pipeline(self, batches: list[Tensor], epoch: int) -> Iterator[Any]:
        """Keep up to `concurrency` batches in flight; yield them in order."""
        window: deque = deque()
        todo = iter(enumerate(batches))
        for i, index in todo:
            window.append(self._submit(index, derive_seed(self.seed, epoch, i)))
            if len(window) >= self.concurrency:
                break
        try:
            while window:
                out = self._attach(window.popleft())
                nxt = next(todo, None)
                if nxt is not None:
                    window.append(self._submit(nxt[1], derive_seed(self.seed, epoch, nxt[0])))
                yield self.transform(out) if self.transform else out
        except GeneratorExit:  # left early (break): errors propagate at once, undrained
            self._drain(window)
            raise

    @staticmethod
    def _drain(window: deque) -> None:
        """Collect batches still in flight when an epoch is left early (break), so their
        shared-memory files are unlinked now rather than when the sampler exits."""
        for pending in window:
            try:
                DistLoader._attach(pending)
            except Exception as err:  # the epoch is over; a failed leftover batch changes nothing
                log.debug("dropped an in-flight batch: %s", err)

    def _dispatch(self, fn: str, args: tuple, local: Callable, local_args: tuple) -> Any:
        """Send to the next sampler process (round-robin) with the ring slot to write the
        batch's features into, or run on the local thread pool."""
        if self.workers:
            peer = self.workers[self._next_worker % len(self.workers)]
            self._next_worker += 1
            slot = self.ring.acquire()
            args = (*args, slot)
            call = rpc.call_async(peer, fn, args, self.ctx.partition_idx, self._batch_timeout)
            return _InSlot(call, self.ring, slot)
        return _Pending(self._pool.submit(local, *local_args), self._batch_timeout)

    @staticmethod
    def _attach(pending: Any) -> Any:
        """Wait for a batch; map its shared-memory features (sampler processes)."""
        out = pending.wait()
        return pending.attach(out) if isinstance(pending, _InSlot) else out

    def data_stats(self) -> dict[str, float]:
        """Remote traffic of this loader's samplers since the last call (e.g. per epoch):
        feature_rows / feature_bytes fetched by RPC, cache_hits (remote rows the halo cache
        served), cache_hit_rate, cache_rows, hop_requests / hop_bytes. The counters of a sampler
        process are shared by the loaders it serves (train and eval loaders of one trainer)."""
        if self.workers:
            calls = [rpc.call_async(w, "stats") for w in self.workers]
            totals = _sum_stats([c.wait() for c in calls])
        else:
            hops = self.sampler.stats
            totals = {"hop_requests": hops.requests, "hop_bytes": hops.bytes,
                      **self.feature_store.counters()}  # fmt: skip
        last, self._last_stats = getattr(self, "_last_stats", {}), totals
        out = {k: v - last.get(k, 0) for k, v in totals.items() if k not in _LEVELS}
        asked = out.get("feature_rows", 0) + out.get("cache_hits", 0)
        out["cache_hit_rate"] = out.get("cache_hits", 0) / asked if asked else 0.0
        out["cache_rows"] = totals.get("cache_rows", 0)
        return out

    def close(self) -> None:
        """Release the local thread pool (RPC stays up for other loaders; see server.shutdown)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


class DistNeighborLoader(DistLoader):
    """Batches of seed nodes → sampled subgraphs (Data / HeteroData, NeighborLoader layout).

    `input_nodes`: global ids (Tensor), `(node_type, ids)`, or None for every node this
    partition owns. `input_time` (temporal sampling, `time_attr` set): one time per input node,
    by default the input nodes' own times. Other arguments: see `DistLoader` (PyG's names).
    """

    def __init__(
        self,
        data: Stores | str | Path,
        num_neighbors: Any,
        input_nodes: Any = None,
        input_time: Tensor | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(data, num_neighbors, **kwargs)
        input_type, ids = input_nodes if isinstance(input_nodes, tuple) else (None, input_nodes)
        if self.graph_store.is_hetero and input_type is None:
            raise ValueError("heterogeneous graph: pass input_nodes=(node_type, ids)")
        if ids is None:
            ids = self.feature_store.get_global_id(input_type)
        self.input_type, self.input_nodes = input_type, torch.as_tensor(ids, dtype=torch.int64)
        self.input_time = self._input_time(input_time)

    def _input_time(self, input_time: Tensor | None) -> Tensor | None:
        """Seed times of the input nodes (temporal sampling), None otherwise."""
        if not self.sampler.temporal:
            if input_time is not None:
                raise ValueError("input_time needs temporal sampling: set time_attr='time'")
            return None
        if input_time is None:
            return self.graph_store.node_time(self.input_type)[self.input_nodes]
        input_time = torch.as_tensor(input_time)
        if input_time.shape != self.input_nodes.shape:
            raise ValueError(
                f"input_time has shape {tuple(input_time.shape)} for {self.input_nodes.numel()} "
                "input nodes: pass one time per input node"
            )
        return input_time

    def _num_inputs(self) -> int:
        return self.input_nodes.numel()

    def _submit(self, index: Tensor, seed: int) -> Any:
        seeds = self.input_nodes[index]
        times = None if self.input_time is None else self.input_time[index]
        args = (self.spec, seeds, index, self.input_type, seed, times)
        local_args = (seeds, index, self.input_type, seed, None, times)
        return self._dispatch("sample_batch", args, self.sampler.sample_batch, local_args)


class DistLinkNeighborLoader(DistLoader):
    """Batches of edges (+ negatives) → subgraphs with `edge_label_index`/`edge_label` (binary)
    or `src_index`/`dst_pos_index`/`dst_neg_index` (triplet), as PyG's LinkNeighborLoader.

    `edge_label_index`: `[2, E]` global ids (homogeneous), or `(edge_type, [2, E])` on a
    heterogeneous graph (the link fields then sit on the edge / end types, as locally).
    Negatives are drawn in the trainer (uniform over the end's node type, seeded per batch), so
    every sampler process sees complete, reproducible batches.
    """

    def __init__(
        self,
        data: Stores | str | Path,
        num_neighbors: Any,
        edge_label_index: Tensor | tuple[Any, Tensor] | None = None,
        edge_label: Tensor | None = None,
        neg_sampling: str | NegativeSampling | None = None,
        neg_sampling_ratio: float | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("time_attr"):
            raise ValueError(
                f"time_attr={kwargs['time_attr']!r}: DistLinkNeighborLoader does not sample "
                "temporally; set sampler.time_attr=null for link prediction"
            )
        super().__init__(data, num_neighbors, **kwargs)
        self.edge_type, edges = self._links(edge_label_index)
        self.edge_label_index = torch.as_tensor(edges, dtype=torch.int64)
        self.edge_label = edge_label
        if isinstance(neg_sampling, NegativeSampling):
            neg_sampling, neg_sampling_ratio = neg_sampling.mode.value, neg_sampling.amount
        if neg_sampling not in (None, "binary", "triplet"):
            raise ValueError(f"neg_sampling={neg_sampling!r}: expected binary, triplet or None")
        self.mode = neg_sampling or "binary"
        self.ratio = 0.0 if neg_sampling is None else float(neg_sampling_ratio or 1.0)
        if self.mode == "triplet" and self.ratio != int(self.ratio):
            raise ValueError(f"neg_sampling_ratio={self.ratio}: triplet mode needs an integer")
        et = self.edge_type
        self.num_src = self.graph_store.num_nodes(None if et is None else et[0])
        self.num_dst = self.graph_store.num_nodes(None if et is None else et[-1])

    def _links(self, edge_label_index: Any) -> tuple[tuple[str, str, str] | None, Any]:
        """(edge type or None, [2, E] links) from PyG's forms; refuses a mismatch with the graph."""
        hetero = self.graph_store.is_hetero
        if isinstance(edge_label_index, tuple) and len(edge_label_index) == 2:
            edge_type, edges = tuple(edge_label_index[0]), edge_label_index[1]
        else:
            edge_type, edges = None, edge_label_index
        if edges is None:
            raise ValueError("edge_label_index is required: [2, E] global ids, or (edge_type, ids)")
        if hetero and edge_type not in self.graph_store.edge_types:
            raise ValueError(
                f"heterogeneous graph: pass edge_label_index=(edge_type, [2, E] ids) with one "
                f"of {self.graph_store.edge_types} (got edge type {edge_type})"
            )
        if not hetero and edge_type is not None:
            raise ValueError(f"edge type {edge_type} given for a homogeneous graph: pass [2, E]")
        return edge_type, edges

    def _num_inputs(self) -> int:
        return self.edge_label_index.size(1)

    def make_batch(self, index: Tensor, seed: int) -> dict[str, Any]:
        """Positives of `index` plus seeded uniform negatives, as sent to a sampler."""
        src, dst = self.edge_label_index[:, index]
        gen = torch.Generator().manual_seed(seed & 0x7FFFFFFFFFFF)
        n = index.numel()
        batch: dict[str, Any] = {"input_id": index}
        if self.edge_type is not None:
            batch["edge_type"] = self.edge_type
        if self.mode == "triplet":
            r = int(self.ratio)
            batch.update(
                src=src, dst=dst, dst_neg=torch.randint(self.num_dst, (n, r), generator=gen)
            )
            return batch
        label = torch.ones(n) if self.edge_label is None else self.edge_label[index]
        k = round(self.ratio * n)
        neg_src = torch.randint(self.num_src, (k,), generator=gen)
        neg_dst = torch.randint(self.num_dst, (k,), generator=gen)
        batch.update(
            src=torch.cat([src, neg_src]),
            dst=torch.cat([dst, neg_dst]),
            edge_label=torch.cat([label, label.new_zeros(k)]),
        )
        return batch

    def _submit(self, index: Tensor, seed: int) -> Any:
        args = (self.spec, self.make_batch(index, seed), self.mode, seed)
        return self._dispatch("sample_edges", args, self.sampler.sample_edges, args[1:])
