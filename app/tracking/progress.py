"""Start-up that shows: one `startup: <phase> 1.2 s` line per phase, and their total as a metric.

A job spends most of a short run before its first step (imports, dataset, partition, spawning,
RPC join, the first batch with numba compiling). Wrapping each such phase in `phase(name)` logs
how long it took when it ends and keeps the time in this process's table; `MlflowTracker.end`
reports them (`log_startup`): `startup_s`, the sum, as a metric and each phase as a param.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("distgnn.startup")

SHOWN_S = 0.1  # shorter phases are logged at DEBUG and left out of summaries
_PHASES: dict[str, float] = {}  # phase name -> seconds of its latest run in this process


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block; log `startup: <name> <s> s` at its end (also when it raises)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        seconds = time.perf_counter() - start
        _PHASES[name] = seconds  # the latest: each job of a sweep run in-process repeats them
        log.log(
            logging.INFO if seconds >= SHOWN_S else logging.DEBUG,
            "startup: %s %.1f s",
            name,
            seconds,
        )


def phases() -> dict[str, float]:
    """Seconds per phase timed so far in this process."""
    return dict(_PHASES)


def phases_line() -> str:
    """`mlflow store 1.2 s, dataset 0.4 s` (phases of this process, >= SHOWN_S), or ""."""
    return ", ".join(f"{k} {v:.1f} s" for k, v in _PHASES.items() if v >= SHOWN_S)


def startup_metrics() -> dict[str, float]:
    """`startup_s` (the sum of every phase timed in this process), or {} if none was."""
    return {"startup_s": sum(_PHASES.values())} if _PHASES else {}


def log_startup(tracker: Any) -> None:
    """Log `startup_s` as a metric and each phase's seconds as a `startup.<phase>_s` param."""
    if not _PHASES:
        return
    tracker.log_metrics(startup_metrics(), step=0)
    tracker.log_params({param_key(k): f"{v:.2f}" for k, v in _PHASES.items()})


def param_key(name: str) -> str:
    """`build task (RPC join)` -> `startup.build_task_RPC_join_s`: a name MLflow accepts."""
    return "startup." + "_".join(re.findall(r"[A-Za-z0-9]+", name)) + "_s"
