"""`BatchEngine`: the trainer's side of distributed sampling, from typed records.

Five records make a loader: the sampler (built once, holding the stores and their
`SamplerOptions`), the inputs (`NodeInputs` / `LinkInputs`), the epoch-batching rule shared
with the local loaders (`EpochBatching`), the feeding mode (`InTrainer` threads or
`SamplerProcesses`, owning their pool or ring), and the device. The engine assumes the RPC
group is joined (`app.distributed.group.join_trainer`, or the PyG layer's join on
construction) and implements `app.loader.protocol.TrainLoader`.

Batches go out in epoch order, at most `feeding.concurrency` in flight (one with
`async_sampling=False`, requested when the previous one is taken): that deque of pending
batches is the bounded channel, and batches come back in order. Its depth is what overlaps
the link with the step: each batch's hop requests and remote feature fetch run while the
trainer computes on the batches before it, so a window deep enough that `depth` batches'
link time covers one batch's latency hides the link whenever its time per batch is below the
step's. A train loader's `Schedule` (the epochs and batches per epoch the trainer takes)
keeps the window full across epochs: it samples no batch past the cap, and while an epoch's
last batches are taken it starts the next epoch's first ones, as `prefetch` would.
"""

from __future__ import annotations

import logging
import weakref
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from app.distributed.feature_store import FeatureStoreCore
from app.distributed.feeding import Feeding, Pending
from app.distributed.graph_store import GraphStoreCore
from app.distributed.inputs import EdgeType, Inputs
from app.distributed.sampler import DistNeighborSampler
from app.loader.epochs import EpochBatching

log = logging.getLogger("distgnn")
_LEVELS = (
    "cache_rows",
    "cache_hit_rate",
    "hot_cache_rows",
    "hot_cache_hit_rate",
    "cpu_s",
    "minflt",
)  # not counters: not differenced


@dataclass(frozen=True)
class Schedule:
    """What the trainer takes from a loader: `epochs` epochs (0: unknown, none followed on),
    at most `max_batches` batches each (0: all; `train.max_steps_per_epoch`)."""

    epochs: int = 0
    max_batches: int = 0

    def __post_init__(self) -> None:
        if self.epochs < 0 or self.max_batches < 0:
            raise ValueError(
                f"Schedule(epochs={self.epochs}, max_batches={self.max_batches}): pass counts "
                ">= 0 (0: unknown / all)"
            )


class BatchEngine:
    """Epochs of sampled batches of `inputs` (see the module docstring)."""

    def __init__(
        self,
        sampler: DistNeighborSampler,
        inputs: Inputs,
        batching: EpochBatching,
        feeding: Feeding,
        device: torch.device | None = None,
        transform: Callable[[Any], Any] | None = None,
        async_sampling: bool = True,
        schedule: Schedule | None = None,
    ) -> None:
        self.sampler, self.inputs, self.batching, self.feeding = sampler, inputs, batching, feeding
        self.device, self.transform, self.async_sampling = device, transform, async_sampling
        self.schedule = schedule or Schedule()
        self.feature_store: FeatureStoreCore = sampler.feature_store
        self.graph_store: GraphStoreCore = sampler.graph_store
        self.labels = find_labels(self.feature_store, self.graph_store)
        self._label_key = label_key(self.labels, inputs.label_key, self.graph_store)
        self.epoch = 0
        self._last_stats: dict[str, float] = {}
        self._warming = feeding.prepare(sampler)
        self._ahead: tuple[int, deque[Pending]] | None = None  # started by `prefetch`
        self._window: deque[Pending] = deque()  # the current epoch's batches in flight
        self._closed = weakref.finalize(self, feeding.close)

    @property
    def num_inputs(self) -> int:
        return self.inputs.num_inputs

    @property
    def concurrency(self) -> int:
        """Batches in flight (the feeding mode's)."""
        return self.feeding.concurrency

    def __len__(self) -> int:
        n, cap = self.batching.num_batches(self.num_inputs), self.schedule.max_batches
        return min(n, cap) if cap else n

    def __iter__(self) -> Generator[Any, None, None]:
        epoch, batches = self.epoch, self._epoch_batches(self.epoch)
        self.epoch += 1
        return self._pipeline(batches, epoch)

    def _epoch_batches(self, epoch: int) -> list[Tensor]:
        """The input indices of each batch of `epoch` the trainer takes, in order."""
        batches, cap = self.batching.indices(self.num_inputs, epoch), self.schedule.max_batches
        return batches[:cap] if cap else batches

    def prefetch(self) -> None:
        """Start sampling the next epoch's first batches now (as many as are kept in flight),
        e.g. while the trainer sets up its tracking, so that epoch's first step finds a batch
        instead of waiting for an empty pipeline. The next `iter()` takes them over; if the
        epoch counter moved meanwhile (a resumed job), they are collected and dropped."""
        if self._ahead is None:
            window: deque[Pending] = deque()
            self._fill(window, iter(enumerate(self._epoch_batches(self.epoch))), self.epoch)
            self._ahead = (self.epoch, window)

    def _fill(
        self,
        window: deque[Pending],
        todo: Iterator[tuple[int, Tensor]],
        epoch: int,
        limit: int | None = None,
    ) -> None:
        """Submit batches from `todo` until `window` holds as many as may be in flight
        (`limit`, default the window's depth)."""
        while self._warming:  # the samplers have built what the first batches need
            self._warming.pop().wait()
        if limit is None:
            limit = self.concurrency if self.async_sampling else 1
        while len(window) < limit and (nxt := next(todo, None)) is not None:
            window.append(self._request(nxt, epoch))

    def _request(self, item: tuple[int, Tensor], epoch: int) -> Pending:
        """Request batch `item` = (its position in `epoch`, its input indices), seeded by both."""
        position, index = item
        request = self.inputs.request(index, self.batching.batch_seed(epoch, position))
        return self.feeding.submit(self.sampler, request)

    def _prefetched(self, epoch: int | None) -> deque[Pending]:
        """The batches `prefetch` started for `epoch`; started for another (any, with None),
        they are collected and dropped."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == epoch:
            return ahead[1]
        if ahead is not None:
            _drain(ahead[1])
        return deque()

    def _pipeline(self, batches: list[Tensor], epoch: int) -> Generator[Any, None, None]:
        """Keep the window full; yield the batches in order."""
        window = self._window = self._prefetched(epoch)
        todo = iter(enumerate(batches))
        for _ in range(len(window)):  # started by `prefetch`
            next(todo)
        self._fill(window, todo, epoch)
        try:
            while window:
                out = self._finish(window.popleft().wait())
                nxt = next(todo, None)
                if nxt is not None and self.async_sampling:  # next batch samples meanwhile
                    window.append(self._request(nxt, epoch))
                elif self.async_sampling:  # the epoch's last: the next one's first meanwhile
                    self._follow_on(epoch + 1, len(window))
                yield out
                if nxt is not None and not self.async_sampling:  # sampled when asked for
                    window.append(self._request(nxt, epoch))
        except GeneratorExit:  # left early (break): errors propagate at once, undrained
            _drain(window)
            raise

    def _follow_on(self, epoch: int, in_flight: int) -> None:
        """Start `epoch`'s first batches (it follows: `schedule.epochs`) while `in_flight` of
        the current one are still out, so at most `concurrency` are in flight in all."""
        if epoch >= self.schedule.epochs:
            return
        if self._ahead is None:
            self._ahead = (epoch, deque())
        ahead_epoch, ahead = self._ahead
        if ahead_epoch != epoch:
            return
        todo = iter(enumerate(self._epoch_batches(epoch)[len(ahead) :], len(ahead)))
        window: deque[Pending] = deque()
        self._fill(window, todo, epoch, self.concurrency - in_flight - len(ahead))
        ahead.extend(window)

    def _finish(self, out: Any) -> Any:
        """Labels from the label file (a partition without `y`), `device`, `transform`."""
        if self.labels is not None:
            attach_labels(out, self.labels, self._label_key)
        if self.device is not None:
            out = out.to(self.device)
        return self.transform(out) if self.transform else out

    def in_flight(self) -> bool:
        """Whether a batch of this loader is still being sampled."""
        ahead = self._ahead
        return bool(self._window) or bool(ahead and ahead[1])

    def data_stats(self) -> dict[str, float]:
        """Remote traffic of this loader's samplers since the last call (e.g. per epoch):
        feature_rows / feature_bytes fetched by RPC, cache_hits (remote rows the halo and hot
        caches served), cache_hit_rate, cache_rows, hot_cache_hits / hot_cache_hit_rate /
        hot_cache_rows (the hot cache's share), hop_requests / hop_bytes. The counters of a sampler
        process are shared by the loaders it serves (train and eval loaders of one trainer)."""
        totals = self.feeding.stats(self.sampler)
        last, self._last_stats = self._last_stats, totals
        out = {k: v - last.get(k, 0) for k, v in totals.items() if k not in _LEVELS}
        asked = out.get("feature_rows", 0) + out.get("cache_hits", 0)
        out["cache_hit_rate"] = out.get("cache_hits", 0) / asked if asked else 0.0
        out["hot_cache_hit_rate"] = out.get("hot_cache_hits", 0) / asked if asked else 0.0
        out["cache_rows"] = totals.get("cache_rows", 0)
        out["hot_cache_rows"] = totals.get("hot_cache_rows", 0)
        return out

    def close(self) -> None:
        """Release the feeding mode's threads and shared-memory files (idempotent)."""
        self._prefetched(None)  # prefetched for an epoch that never ran
        self._closed()


def _drain(window: deque[Pending]) -> None:
    """Collect batches still in flight when an epoch is left early (break), so their
    shared-memory files are unlinked now rather than when the sampler exits."""
    for pending in window:
        try:
            pending.wait()
        except Exception as err:  # the epoch is over; a failed leftover batch changes nothing
            log.debug("dropped an in-flight batch: %s", err)
    window.clear()


def find_labels(fs: FeatureStoreCore, gs: GraphStoreCore) -> Any:
    """Whole-graph labels for batches of a partition without `y`: the stores' `labels` (PyG's
    scripts set `feature.labels` / `graph.labels`), else the label file beside the partition
    (`gs.labels`, read by `GraphStoreCore.from_partition`); None when there are none."""
    labels = getattr(fs, "labels", None)
    return labels if labels is not None else getattr(gs, "labels", None)


def label_key(labels: Any, key: str | EdgeType | None, gs: GraphStoreCore) -> Any:
    """Whose labels a lone label tensor holds: on a heterogeneous link loader, the nodes of an
    end type when it has one label per node of that type (a node label file beside a link
    loader), else the link type's edges (PyG's rule); otherwise `key` as given."""
    if isinstance(key, tuple) and isinstance(labels, Tensor):
        for node_type in (key[0], key[-1]):
            if labels.size(0) == gs.num_nodes(node_type):
                return node_type
    return key


def attach_labels(data: Any, labels: Any, key: str | EdgeType | None) -> None:
    """`y` from whole-graph labels where the batch has none (PyG's `feature.labels` rules).

    {node type: tensor}: every sampled node's (by global `n_id`) of those types. A tensor: the
    nodes' of a homogeneous batch or of node type `key`; with an edge type `key` (a
    heterogeneous link batch) one label per edge of that type, set on its sampled edges by
    global `e_id` (PyG's `data[edge_type].y`; a label file of per-edge ratings, say).
    """
    if isinstance(key, tuple) and not isinstance(labels, dict):
        _attach_edge_labels(data[key], labels, key)
        return
    if not isinstance(labels, dict):
        labels = {key: labels}
    for node_type, y in labels.items():
        if node_type is not None and node_type not in data.node_types:
            continue
        store = data if node_type is None else data[node_type]
        if "y" not in store and "n_id" in store:
            store.y = y[store.n_id]


def _attach_edge_labels(store: Any, labels: Tensor, edge_type: EdgeType) -> None:
    if "y" in store or "e_id" not in store:
        return
    e_id = store.e_id
    if e_id.numel() and int(e_id.max()) >= labels.size(0):
        raise ValueError(
            f"labels hold {labels.size(0)} rows, but the batch samples edge {int(e_id.max())} "
            f"of {edge_type}: a lone label tensor on a heterogeneous link loader is one label "
            "per edge of that type (PyG's rule); pass {node type: labels} for node labels"
        )
    store.y = labels[e_id]
