"""Where a batch's CPU goes: thread CPU seconds per named stage of batch building, per process.

The loaders and samplers run each stage of a batch (the sampling kernel, relabel bookkeeping,
routing a hop by owner, the feature and label gathers, the `Data` assembly, the shared-memory
handoff) inside `stage(name)`, which adds the CPU time of the calling thread to a process-wide
total; `snapshot()` reads the totals, so `bench dist_sampling` can report the split per batch and
later changes show their effect. Stages nest: an inner stage's time is its own, not its outer
stage's too (each thread keeps its current stage), so the totals add up to the CPU the stages
took. What no stage covers (RPC framing in torch's threads, Python glue) is the process CPU time
minus their sum.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

STAGES = (
    "kernel",  # the numba sampling kernels (the local loader's fused one relabels too)
    "relabel",  # global → local ids and edge columns outside the fused kernel
    "route",  # splitting a hop's frontier by owner, sending, merging the answers in order
    "features",  # float node attributes (x)
    "labels",  # every other node attribute (y, masks) and edge attributes
    "assembly",  # SamplerOutput / Data / HeteroData built from the arrays
    "handoff",  # a batch's tensors exported through its shared-memory ring slot
)

_totals: dict[str, float] = dict.fromkeys(STAGES, 0.0)
_lock = threading.Lock()
_current = threading.local()  # .top: (stage name, thread CPU time it last resumed at) or None


def _add(name: str, seconds: float) -> None:
    with _lock:
        _totals[name] += seconds


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Count the thread CPU time of the block as stage `name` (one of `STAGES`)."""
    if name not in _totals:
        raise ValueError(f"unknown stage {name!r}; use one of {STAGES}")
    now = time.thread_time()
    outer: tuple[str, float] | None = getattr(_current, "top", None)
    if outer is not None:
        _add(outer[0], now - outer[1])
    _current.top = (name, now)
    try:
        yield
    finally:
        end = time.thread_time()
        _add(name, end - _current.top[1])
        _current.top = None if outer is None else (outer[0], end)


def snapshot() -> dict[str, float]:
    """CPU seconds per stage of this process so far (every thread)."""
    with _lock:
        return dict(_totals)
