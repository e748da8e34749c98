"""`DeviceFeatures`: a node attribute held for a trainer's device, whole or as a hot-row cache.

A GPU sampler's batches are built on the GPU, so their features should be there too. When the
whole attribute fits the byte budget (`train.gpu_feature_bytes`) it is copied to the device once
and a batch is one `index_select` there. Otherwise the rows of the nodes a sampler reaches most
(the highest degree: a node is drawn as a neighbour once per out-edge) are cached on the device
and the rest gathered from host memory (pinned where CUDA exists, so the copy is asynchronous;
the host reads the ids it gathers back in one copy, the gather's one wait for the device);
a partial cache's hits and misses are counted on the device and read only when the hit rate is
asked for (a whole copy always hits); each sampling thread counts in its own tensor (threads
build batches on streams of their own, and two streams adding to one tensor would lose counts).
On the CPU the "device" is the host and the same code runs, which is how it is tested.
"""

from __future__ import annotations

import logging
import threading

import torch
from torch import Tensor

log = logging.getLogger("distgnn.train")


class DeviceFeatures:
    """Rows of `values` [N, ...] for ids on `device`, within `budget` bytes of device memory."""

    def __init__(
        self, values: Tensor, device: torch.device, budget: int, degree: Tensor | None = None
    ) -> None:
        if budget < 0:
            raise ValueError(f"feature budget must be >= 0 bytes (got {budget})")
        n = values.size(0)
        row_bytes = max(1, values[:1].numel() * values.element_size())
        self.device, self.num_rows = device, n
        self.cached_rows = n if n * row_bytes <= budget else int(budget // row_bytes)
        self.slot: Tensor | None = None  # node id → its cache row, -1 on the host (partial only)
        if self.cached_rows == n:
            self.cache, self.host = values.to(device), values
        else:
            if degree is None or degree.numel() != n:
                raise ValueError(f"a partial cache of {n} rows needs a degree per row")
            hot = torch.argsort(degree, descending=True, stable=True)[: self.cached_rows]
            self.slot = torch.full((n,), -1, dtype=torch.int64, device=device)
            self.slot[hot.to(device)] = torch.arange(self.cached_rows, device=device)
            self.cache = values[hot].to(device)
            cuda = device.type == "cuda"
            self.host = values.pin_memory() if cuda and not values.is_pinned() else values
        self._counts: dict[int, Tensor] = {}  # thread → [hits, rows asked for]
        self._lock = threading.Lock()

    @property
    def whole(self) -> bool:
        """Whether every row is on the device (no host gathers)."""
        return self.slot is None

    def _count(self) -> Tensor:
        """This thread's [hits, rows] counter."""
        me = threading.get_ident()
        counts = self._counts.get(me)
        if counts is None:
            with self._lock:
                counts = self._counts[me] = torch.zeros(2, dtype=torch.int64, device=self.device)
        return counts

    def __call__(self, index: Tensor) -> Tensor:
        """`values[index]` on the device (`index` on any device)."""
        index = index.to(self.device, non_blocking=True)
        if self.slot is None:  # every row a hit: nothing to count
            return self.cache.index_select(0, index)
        counts = self._count()
        counts[1] += index.numel()
        slot = self.slot[index]
        hit = slot >= 0
        counts[0] += hit.sum()
        if self.cached_rows:  # every row from the cache, the misses' (row 0) replaced below
            out = self.cache.index_select(0, slot.clamp(min=0))
        else:
            out = torch.empty((index.numel(), *self.cache.shape[1:]), dtype=self.cache.dtype,
                              device=self.device)  # fmt: skip
        # the host's part: the ids it gathers, read back whole (-1 for a hit) in one copy
        wanted = torch.where(hit, -1, index).cpu()
        miss = (wanted >= 0).nonzero().view(-1)  # on the host: no wait
        if miss.numel():
            rows = self.host.index_select(0, wanted[miss])
            if self.device.type == "cuda":
                rows = rows.pin_memory()
            to = self.device
            out.index_copy_(0, miss.to(to, non_blocking=True), rows.to(to, non_blocking=True))
        return out

    def hit_rate(self, reset: bool = True) -> float:
        """Rows served from the device / rows asked for since the last reset (1.0 if none)."""
        with self._lock:
            counts = list(self._counts.values())
        if not counts:
            return 1.0
        hits, rows = torch.stack(counts).sum(0).tolist()
        if reset:
            for c in counts:
                c.zero_()
        return hits / rows if rows else 1.0

    def log_hit_rate(self, what: str) -> None:
        """Log (and reset) the hit rate of a partial cache; a whole copy always hits."""
        if self.slot is not None:
            log.info(
                "%s: %d of %d rows on %s, hit rate %.3f",
                what, self.cached_rows, self.num_rows, self.device, self.hit_rate(),
            )  # fmt: skip


def auto_budget(device: torch.device, reserve_factor: int = 4) -> int:
    """Device bytes left for features: the free memory less `reserve_factor` times what is
    allocated now (the model's weights, measured once it is there: weights, gradients and two
    Adam moments) and a tenth of the card for the batches' activations. The CPU: unbounded."""
    if device.type != "cuda":
        return 1 << 62
    free, total = torch.cuda.mem_get_info(device)
    used = torch.cuda.memory_allocated(device)
    return max(0, free - reserve_factor * used - total // 10)
