"""`DistNeighborLoader` / `DistLinkNeighborLoader`: the trainer's side of distributed sampling.

The trainer cuts its seeds into batches (shuffled per epoch with a seeded, epoch-dependent
permutation) and sends each batch to one of ITS sampler processes (`sampler<node>.<rank>.<w>`)
round-robin, keeping at most `concurrency` batches in flight: that deque of pending calls is
the bounded channel, and batches come back in order. A sampler process writes a batch's
features into a slot of this loader's shared-memory ring (`shm.BatchRing`), reused once the
trainer has dropped the batch. With `num_workers=0` the trainer samples itself, on a pool of `concurrency` threads (the numba kernel releases the GIL, RPC waits too),
and serves its partition to peers. Every wait is bounded by the RPC timeout; a dead or silent
peer surfaces as `PeerError` naming it.

Who starts the sampler processes: the launcher (its `DistContext.from_runtime` names them), or,
in a hand-launched PyG-style script (a context with PyG's five fields only), the first loader
of the process (`workers.join`); the last loader closed stops them and leaves RPC.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.sampler import NegativeSampling

from app.config import SamplerConfig
from app.distributed import rpc, server, workers
from app.distributed.context import DistContext
from app.distributed.dist_neighbor_sampler import DistNeighborSampler
from app.distributed.feature_store import LocalFeatureStore
from app.distributed.graph_store import LocalGraphStore
from app.distributed.shm import PREFIX, SHM_DIR, BatchRing
from app.loader.epochs import EpochBatching
from app.runtime import worker_name

Stores = tuple[LocalFeatureStore, LocalGraphStore]
log = logging.getLogger("distgnn")
PREPARE_TIMEOUTS = 5  # a sampler's warm-up may wait 4 RPC timeouts for a halo cache fill
DEFAULT_RPC_THREADS = 32  # num_rpc_threads=None: RPC handler threads of a process


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
        try:
            return self.ring.attach(data, self.slot)
        except FileNotFoundError as err:  # it exited between its reply and this mapping
            raise rpc.PeerError(
                f"{self.call.peer} (partition {self.call.partition}) is gone: the shared memory "
                f"of its last batch was removed ({err.filename})"
            ) from None


class _Channel:
    """What PyG's tests ask of a loader's channel after an epoch: is anything still pending."""

    def __init__(self, loader: DistLoader) -> None:
        self._loader = loader

    def empty(self) -> bool:
        ahead = self._loader._ahead
        return not self._loader._window and not (ahead and ahead[1])


class DistLoader:
    """Shared machinery: stores, RPC group, sampler spec, batching, the in-flight window.

    PyG's positional order (`current_ctx, master_addr, master_port, channel, num_rpc_threads,
    rpc_timeout, dist_sampler`); the loaders pass the rest by keyword. With a context built
    from PyG's five fields (a hand-launched script), the loader derives the RPC identity
    (`DistContext.for_partition`), starts its own `num_workers` sampler processes and stops
    them when closed (`close`, `with loader:`, garbage collection or interpreter exit).
    Arguments PyG has and this loader cannot honour are refused with one line.
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
        async_sampling: bool = True,
        device: Any = None,
        filter_per_worker: bool | None = False,
        rpc_worker_names: Any = None,
        **unknown: Any,
    ) -> None:
        _refuse(unknown, channel, rpc_worker_names, dist_sampler)
        if concurrency <= 0 or num_workers < 0 or feature_cache_size < 0:
            raise ValueError(
                f"concurrency={concurrency}, num_workers={num_workers}, feature_cache_size="
                f"{feature_cache_size}: need concurrency > 0, num_workers >= 0, "
                "feature_cache_size >= 0 (sampler.feature_cache_size=0: off)"
            )
        self.batching = EpochBatching(batch_size, shuffle, drop_last, seed)
        self.ctx = current_ctx
        self.feature_store, self.graph_store = self._stores(data)
        gs = self.graph_store
        if current_ctx is not None:  # PyG's five fields → our RPC identity (no-op if derived)
            self.ctx = current_ctx.for_partition(gs.num_partitions, gs.partition_idx, num_workers)
        self.num_workers, self.concurrency = num_workers, concurrency
        self.epoch, self.transform = 0, transform
        self.rpc_timeout, self.async_sampling = rpc_timeout, async_sampling
        self.device = None if device is None else torch.device(device)
        self.filter_per_worker = filter_per_worker  # features are always gathered by the sampler
        self.labels = find_labels(self.feature_store, gs)
        router = None
        if self.ctx is not None and gs.num_partitions > 1:
            router = rpc.RPCRouter.for_context(self.ctx)
        self.sampler = dist_sampler or DistNeighborSampler(
            self.ctx,
            (self.feature_store, gs),
            num_neighbors=num_neighbors,
            replace=replace,
            subgraph_type=subgraph_type,
            disjoint=disjoint,
            temporal_strategy=temporal_strategy,
            time_attr=time_attr,
            router=router,
            attrs=attrs,
            feature_cache_size=feature_cache_size,
        )
        if num_workers and current_ctx is None:
            raise ValueError(f"num_workers={num_workers} needs current_ctx (sampler processes)")
        self._group = self._join_rpc(current_ctx, master_addr, master_port, router,
                                     init_timeout, num_rpc_threads)  # fmt: skip
        self.workers = [
            worker_name("sampler", self.ctx.partition_idx, self.ctx.local_rank, w)
            for w in range(num_workers if self.ctx is not None else 0)
        ]
        self._pool = ThreadPoolExecutor(concurrency) if not self.workers else None
        # batch requests go out from this thread: an RPC call costs the trainer's step ~3 ms
        self._sender = ThreadPoolExecutor(1, "distgnn-send") if self.workers else None
        self.options = self.sampler.options  # sent with every batch request
        # sampler processes share this node: features come back through reused /dev/shm slots
        self.ring = BatchRing() if self.workers else None
        self._next_worker = 0
        # a batch makes one round of calls per hop plus the feature fetch, each bounded by
        # rpc_timeout: waiting longer for the whole batch lets the inner error name the culprit
        self._batch_timeout = rpc_timeout * (self.sampler.num_hops + 2)
        self._release = weakref.finalize(
            self, _release, self._pool, self._sender, self.ring, self._group
        )
        self._warming = self._prepare_samplers()
        self._ahead: tuple[int, deque] | None = None  # (epoch, batches) started by `prefetch`
        self._window: deque = deque()  # the current epoch's batches in flight

    def _prepare_samplers(self) -> list[rpc.PendingCall]:
        """Have every sampler build what its first batches need (`DistNeighborSampler.prepare`)
        while the trainer sets up; the first epoch waits for it before its first batch."""
        if not self.workers:
            self.sampler.prepare(self.concurrency)
            return []
        args, part = (self.options, self.concurrency), self.ctx.partition_idx
        timeout = PREPARE_TIMEOUTS * self.rpc_timeout
        return [rpc.call_async(w, "prepare_sampler", args, part, timeout) for w in self.workers]

    def _join_rpc(
        self, given: DistContext | None, master_addr: str | None, master_port: Any,
        router: Any, init_timeout: float, num_rpc_threads: int | None,
    ) -> workers.Group | None:  # fmt: skip
        """Join the RPC group: as the launcher's process, or (PyG's five fields) as a
        hand-launched trainer that starts its own sampler processes."""
        if given is None:
            return None
        if self.num_workers == 0:  # this trainer is the process that serves its partition
            server.register(self.feature_store, self.graph_store, router)
        if master_port is None or master_addr is None:
            raise ValueError(
                f"master_addr={master_addr!r}, master_port={master_port!r}: both are required "
                "with current_ctx (the address and port of the RPC group's master)"
            )
        threads = num_rpc_threads or DEFAULT_RPC_THREADS
        if given.is_derived:  # the launcher (or the caller) owns RPC and the sampler processes
            rpc.init_rpc(self.ctx, master_addr, int(master_port), threads,
                         timeout_s=self.rpc_timeout, init_timeout_s=init_timeout)  # fmt: skip
            return None
        root = None if self.graph_store.root is None else str(self.graph_store.root)
        return workers.join(self.ctx, root, master_addr, int(master_port), self.rpc_timeout,
                            init_timeout, threads)  # fmt: skip

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

    @property
    def num_inputs(self) -> int:
        """Seed nodes (links for the link loader) cut into batches."""
        raise NotImplementedError

    def _submit(self, index: Tensor, batch_idx: int) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.batching.num_batches(self.num_inputs)

    @property
    def dist_sampler(self) -> DistNeighborSampler:
        """PyG's name of the sampler."""
        return self.sampler

    @property
    def channel(self) -> _Channel:
        """PyG's message channel, read-only: `empty()` says no batch is in flight (batches come
        back by RPC / shared memory here, so there is no queue to pass in)."""
        return _Channel(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(pid={os.getpid()})"

    def __iter__(self) -> Iterator[Any]:
        epoch, batches = self.epoch, self._epoch_batches()
        self.epoch += 1
        return self._pipeline(batches, epoch)

    def _epoch_batches(self) -> list[Tensor]:
        """The input indices of each batch of epoch `self.epoch`, in order."""
        return self.batching.indices(self.num_inputs, self.epoch)

    def prefetch(self) -> None:
        """Start sampling the next epoch's first batches now (as many as are kept in flight),
        e.g. while the trainer sets up its tracking, so that epoch's first step finds a batch
        instead of waiting for an empty pipeline. The next `iter()` takes them over; if the
        epoch counter moved meanwhile (a resumed job), they are collected and dropped."""
        if self._ahead is None:
            window: deque = deque()
            self._fill(window, iter(enumerate(self._epoch_batches())), self.epoch)
            self._ahead = (self.epoch, window)

    def _fill(self, window: deque, todo: Iterator[tuple[int, Tensor]], epoch: int) -> None:
        """Submit batches from `todo` until `window` holds as many as may be in flight
        (`concurrency`; one with `async_sampling=False`)."""
        while self._warming:  # the samplers have built what the first batches need
            self._warming.pop().wait()
        limit = self.concurrency if self.async_sampling else 1
        while len(window) < limit and (nxt := next(todo, None)) is not None:
            window.append(self._request(nxt, epoch))

    def _request(self, item: tuple[int, Tensor], epoch: int) -> Any:
        """Request batch `item` = (its position in `epoch`, its input indices), seeded by both."""
        return self._send(item[1], self.batching.batch_seed(epoch, item[0]))

    def _send(self, index: Tensor, seed: int) -> Any:
        """Request a batch (`_submit`): from the sender thread when sampler processes make it,
        so the trainer goes on with its step while the call is made (batches stay in order:
        one thread sends them all)."""
        if self._sender is None:
            return self._submit(index, seed)
        return self._sender.submit(self._submit, index, seed)

    def _prefetched(self, epoch: int | None) -> deque:
        """The batches `prefetch` started for `epoch`; started for another (any, with None),
        they are collected and dropped."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == epoch:
            return ahead[1]
        if ahead is not None:
            self._drain(ahead[1])
        return deque()

    def _pipeline(self, batches: list[Tensor], epoch: int) -> Iterator[Any]:
        """Keep up to `concurrency` batches in flight (with `async_sampling=False`, one,
        requested when the previous one is taken); yield them in order."""
        window = self._window = self._prefetched(epoch)
        todo = iter(enumerate(batches))
        for _ in range(len(window)):  # started by `prefetch`
            next(todo)
        self._fill(window, todo, epoch)
        try:
            while window:
                out = self._finish(self._attach(window.popleft()))
                nxt = next(todo, None)
                if nxt is not None and self.async_sampling:  # next batch samples meanwhile
                    window.append(self._request(nxt, epoch))
                yield out
                if nxt is not None and not self.async_sampling:  # sampled when asked for
                    window.append(self._request(nxt, epoch))
        except GeneratorExit:  # left early (break): errors propagate at once, undrained
            self._drain(window)
            raise

    def _finish(self, out: Any) -> Any:
        """Labels from the label file (a partition without `y`), `device`, `transform`."""
        if self.labels is not None:
            attach_labels(out, self.labels, getattr(self, "input_type", None))
        if self.device is not None:
            out = out.to(self.device)
        return self.transform(out) if self.transform else out

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
        if isinstance(pending, Future):  # still with the sender thread: the call, once made
            pending = pending.result()
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
        """Release this loader: its thread pool, its shared-memory ring's files, and its share of
        the RPC group it formed (the last loader out stops the sampler processes and leaves
        RPC). Under the launcher, RPC stays up for other loaders (see `workers.shutdown`)."""
        self._prefetched(None)  # prefetched for an epoch that never ran
        self._release()

    def __enter__(self) -> DistLoader:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    @contextmanager
    def enable_multithreading(self, num_threads: int | None = None) -> Iterator[None]:
        """PyG's: use `num_threads` torch threads in each sampler process while in the block
        (default: the cores of this machine divided among them); needs num_workers > 0."""
        if not self.workers:
            raise ValueError(
                "enable_multithreading needs sampler processes: pass num_workers > 0 "
                "(with num_workers=0 the trainer samples on `concurrency` threads)"
            )
        if num_threads is None:
            num_threads = max(1, (os.cpu_count() or 1) // len(self.workers))
        if num_threads <= 0:
            raise ValueError(f"num_threads={num_threads}: pass a positive count")
        self._set_threads(num_threads)
        try:
            yield
        finally:
            self._set_threads(1)

    def _set_threads(self, num_threads: int) -> None:
        calls = [rpc.call_async(w, workers.set_threads, (num_threads,)) for w in self.workers]
        for call in calls:
            call.wait()


def _release(
    pool: ThreadPoolExecutor | None,
    sender: ThreadPoolExecutor | None,
    ring: BatchRing | None,
    group: Any,
) -> None:
    """What `close` frees (also run on garbage collection and at exit: holds no loader)."""
    for threads in (pool, sender):
        if threads is not None:
            threads.shutdown(wait=False, cancel_futures=True)
    if ring is not None:  # the slot files the sampler processes wrote for this ring
        for path in SHM_DIR.glob(f"{PREFIX}*-{ring.tag}s*"):
            path.unlink(missing_ok=True)
    workers.leave(group)


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


def find_labels(fs: LocalFeatureStore, gs: LocalGraphStore) -> Any:
    """Whole-graph labels for batches of a partition without `y`: the stores' `labels` (PyG's
    scripts set `feature.labels` / `graph.labels`), else the label file beside the partition
    (`gs.labels`, read by `LocalGraphStore.from_partition`); None when there are none."""
    labels = getattr(fs, "labels", None)
    return labels if labels is not None else getattr(gs, "labels", None)


def attach_labels(data: Any, labels: Any, input_type: str | None) -> None:
    """`y` of every sampled node (global `n_id`) where the batch has none, from whole-graph
    labels: a tensor (homogeneous, or the input node type's), or {node type: tensor}."""
    if not isinstance(labels, dict):
        labels = {input_type: labels}
    for node_type, y in labels.items():
        store = data if node_type is None else data[node_type]
        if node_type is not None and node_type not in data.node_types:
            continue
        if "y" not in store and "n_id" in store:
            store.y = y[store.n_id]


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
        super().__init__(
            current_ctx, master_addr, master_port, dist_sampler=dist_sampler, data=data,
            num_neighbors=num_neighbors, replace=replace, subgraph_type=subgraph_type,
            disjoint=disjoint, temporal_strategy=temporal_strategy, time_attr=time_attr, transform=transform, concurrency=concurrency,
            num_rpc_threads=num_rpc_threads, filter_per_worker=filter_per_worker,
            async_sampling=async_sampling, device=device, **kwargs,
        )  # fmt: skip
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

    @property
    def num_inputs(self) -> int:
        return self.input_nodes.numel()

    def _submit(self, index: Tensor, seed: int) -> Any:
        seeds = self.input_nodes[index]
        times = None if self.input_time is None else self.input_time[index]
        args = (self.options, seeds, index, self.input_type, seed, times)
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
        if edge_label_time is not None:
            raise ValueError(
                "edge_label_time: DistLinkNeighborLoader does not sample temporally; pass None"
            )
        if time_attr:
            raise ValueError(
                f"time_attr={time_attr!r}: DistLinkNeighborLoader does not sample "
                "temporally; set sampler.time_attr=null for link prediction"
            )
        super().__init__(
            current_ctx, master_addr, master_port, dist_sampler=dist_sampler, data=data,
            num_neighbors=num_neighbors, replace=replace, subgraph_type=subgraph_type,
            disjoint=disjoint, temporal_strategy=temporal_strategy, time_attr=time_attr, transform=transform, concurrency=concurrency,
            num_rpc_threads=num_rpc_threads, filter_per_worker=filter_per_worker,
            async_sampling=async_sampling, device=device, **kwargs,
        )  # fmt: skip
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
            head, edges = edge_label_index  # (None, ids): PyG's homogeneous form
            edge_type = None if head is None else tuple(head)
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

    @property
    def num_inputs(self) -> int:
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
        args = (self.options, self.make_batch(index, seed), self.mode, seed)
        return self._dispatch("sample_edges", args, self.sampler.sample_edges, args[1:])
