"""Feeding modes: who samples a distributed loader's batches, as a type.

* `InTrainer`: the trainer samples itself, on a pool of `concurrency` threads (the numba kernel
  releases the GIL, RPC waits too); its sampler's counters are this process's.
* `SamplerProcesses`: the node's sampler processes (`sampler<node>.<rank>.<w>`) sample, each
  batch sent round-robin from one sender thread (an RPC call costs the trainer's step ~3 ms;
  one thread keeps the batches in order); a batch's features come back through a slot of this
  mode's shared-memory ring (`shm.BatchRing`), reused once the trainer dropped the batch.

Both own what they start (the pool; the sender and the ring) and free it in `close`. Every
wait is bounded by `rpc_timeout` per round of calls a batch makes (one per hop plus the
feature fetch), so the inner error, naming the peer, surfaces first.
"""

from __future__ import annotations

import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from app.distributed import rpc
from app.distributed.context import DistContext
from app.distributed.sampler import DistNeighborSampler
from app.distributed.shm import PREFIX, SHM_DIR, BatchRing
from app.loader.batch import assemble
from app.runtime import worker_name
from app.sampler.output import SampledBatch

PREPARE_TIMEOUTS = 5  # a sampler's warm-up may wait 4 RPC timeouts for a halo cache fill


class BatchRequest(Protocol):
    """One batch to sample: the sampler endpoint that makes it, and its arguments."""

    endpoint: str  # the sampler's method and the server's endpoint of that name

    def wire(self) -> tuple[Any, ...]:
        """The endpoint's arguments after the sampler options and before the ring slot."""
        ...

    def run(self, sampler: DistNeighborSampler, alloc: Any = None) -> SampledBatch:
        """Sample it here, with `sampler` (the record; `wait` builds the batch)."""
        ...


class Pending(Protocol):
    """A batch on its way: `wait()` returns it, built on this side from the sampler's record
    (`app.loader.batch.assemble`; its shared-memory features mapped)."""

    def wait(self) -> Any: ...


@dataclass
class _InThread:
    """A batch being sampled on this process's pool."""

    future: Future[Any]
    timeout: float

    def wait(self) -> Any:
        return assemble(self.future.result(timeout=self.timeout))


@dataclass
class _InSlot:
    """A batch requested from a sampler process, written into ring slot `slot`."""

    call: rpc.PendingCall
    ring: BatchRing
    slot: str

    def wait(self) -> Any:
        record = self.call.wait()
        try:
            return assemble(self.ring.attach(record, self.slot))
        except FileNotFoundError as err:  # it exited between its reply and this mapping
            raise rpc.PeerError(
                f"{self.call.peer} (partition {self.call.partition}) is gone: the shared memory "
                f"of its last batch was removed ({err.filename})"
            ) from None


@dataclass
class _Sending:
    """A batch request still with the sender thread: the call, once made, then its batch."""

    future: Future[Pending]

    def wait(self) -> Any:
        return self.future.result().wait()


class InTrainer:
    """Sampling in the trainer's own threads: `concurrency` batches at once."""

    def __init__(self, concurrency: int, rpc_timeout: float) -> None:
        if concurrency <= 0:
            raise ValueError(f"concurrency={concurrency}: pass batches in flight >= 1")
        self.concurrency, self.rpc_timeout = concurrency, rpc_timeout
        self._pool = ThreadPoolExecutor(concurrency, "distgnn-sample")
        self._release = weakref.finalize(self, _shutdown, self._pool)

    def prepare(self, sampler: DistNeighborSampler) -> list[Pending]:
        """Build what the first batches need now (`DistNeighborSampler.prepare`)."""
        sampler.prepare(self.concurrency)
        return []

    def submit(self, sampler: DistNeighborSampler, request: BatchRequest) -> Pending:
        timeout = self.rpc_timeout * (sampler.num_hops + 2)
        return _InThread(self._pool.submit(request.run, sampler), timeout)

    def stats(self, sampler: DistNeighborSampler) -> dict[str, float]:
        """This process's counters: its sampler's hops, its feature store's fetches."""
        hops = sampler.stats
        return {
            "hop_requests": hops.requests,
            "hop_bytes": hops.bytes,
            **sampler.feature_store.counters(),
        }

    def close(self) -> None:
        self._release()


class SamplerProcesses:
    """Sampling in this trainer's sampler processes `workers` (RPC names) of `partition`."""

    def __init__(
        self, workers: list[str], partition: int, concurrency: int, rpc_timeout: float
    ) -> None:
        if concurrency <= 0 or not workers:
            raise ValueError(
                f"concurrency={concurrency}, workers={workers}: need batches in flight >= 1 "
                "and at least one sampler process"
            )
        self.workers, self.partition = workers, partition
        self.concurrency, self.rpc_timeout = concurrency, rpc_timeout
        self.ring = BatchRing()
        self._sender = ThreadPoolExecutor(1, "distgnn-send")
        self._next = 0
        self._release = weakref.finalize(self, _shutdown, self._sender, self.ring.tag)

    def prepare(self, sampler: DistNeighborSampler) -> list[Pending]:
        """Have every sampler process build `sampler`'s twin and what its first batches need
        while the trainer sets up; the first epoch waits for these calls."""
        args, timeout = (sampler.options, self.concurrency), PREPARE_TIMEOUTS * self.rpc_timeout
        return [
            rpc.call_async(w, "prepare_sampler", args, self.partition, timeout)
            for w in self.workers
        ]

    def submit(self, sampler: DistNeighborSampler, request: BatchRequest) -> Pending:
        """Send from the sender thread, so the trainer goes on with its step meanwhile."""
        return _Sending(self._sender.submit(self._send, sampler, request))

    def _send(self, sampler: DistNeighborSampler, request: BatchRequest) -> Pending:
        peer = self.workers[self._next % len(self.workers)]
        self._next += 1
        slot = self.ring.acquire()
        args = (sampler.options, *request.wire(), slot)
        timeout = self.rpc_timeout * (sampler.num_hops + 2)
        return _InSlot(
            rpc.call_async(peer, request.endpoint, args, self.partition, timeout), self.ring, slot
        )

    def stats(self, sampler: DistNeighborSampler) -> dict[str, float]:
        """The sampler processes' counters (shared by every loader of this trainer)."""
        calls = [rpc.call_async(w, "stats") for w in self.workers]
        return _sum_stats([c.wait() for c in calls])

    def close(self) -> None:
        self._release()


Feeding = InTrainer | SamplerProcesses


def feeding_for(
    ctx: DistContext | None, num_workers: int, concurrency: int, rpc_timeout: float
) -> Feeding:
    """The trainer `ctx`'s `num_workers` sampler processes when it has any, else its threads."""
    if ctx is None or not num_workers:
        return InTrainer(concurrency, rpc_timeout)
    names = [
        worker_name("sampler", ctx.partition_idx, ctx.local_rank, w) for w in range(num_workers)
    ]
    return SamplerProcesses(names, ctx.partition_idx, concurrency, rpc_timeout)


def _sum_stats(stats: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for s in stats for k in s}
    return {k: sum(s.get(k, 0) for s in stats) for k in keys}


def _shutdown(threads: ThreadPoolExecutor, ring_tag: str | None = None) -> None:
    """What `close` frees (also on garbage collection and at exit: holds no feeding)."""
    threads.shutdown(wait=False, cancel_futures=True)
    if ring_tag is not None:  # the slot files the sampler processes wrote for this ring
        for path in SHM_DIR.glob(f"{PREFIX}*-{ring_tag}s*"):
            path.unlink(missing_ok=True)
