"""Start-up that shows: one `startup: <phase> 1.2 s` line per phase, and their total as a metric.

A job spends most of a short run before its first step (imports, dataset, partition, spawning,
RPC join, the first batch with numba compiling). Wrapping each such phase in `phase(name)` logs
how long it took when it ends and keeps the time in this process's table; `MlflowTracker.end`
reports them (`log_startup`): `startup_s`, the sum, as a metric and each phase as a param.
A phase that runs for seconds is announced while it runs; `stage(what)` does the same for the
steps after training (stopping processes, closing the MLflow run).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("distgnn.startup")

SHOWN_S = 0.1  # shorter phases are logged at DEBUG and left out of summaries
ANNOUNCE_S = 2.0  # a phase still running after this long is announced ...
TICK_S = 4.0  # ... and again every TICK_S: no console silence of more than a few seconds
_PHASES: dict[str, float] = {}  # phase name -> seconds of its latest run in this process


class _Ticker:
    """While a block runs past `first_s`, log `<what> ... <s> s` then, every `every_s`:
    a stage that takes seconds says so instead of leaving the console silent."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        first_s: float,
        every_s: float,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.logger, self.what, self.every_s = logger, what, every_s
        self.say = say or (lambda line: logger.info("%s", line))
        self.start = time.perf_counter()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(first_s,), daemon=True)
        self.thread.name = "progress-ticker"

    def _run(self, first_s: float) -> None:
        wait = first_s
        while not self.done.wait(wait):
            self.say(f"{self.what} ... {time.perf_counter() - self.start:.0f} s")
            wait = self.every_s

    def __enter__(self) -> _Ticker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()


@contextmanager
def stage(what: str, logger: logging.Logger | None = None) -> Iterator[None]:
    """Log `what` now, then `what ... N s` every TICK_S while the block runs: for the stages
    after training (stopping processes, closing the MLflow run) that can take seconds."""
    logger = logger or logging.getLogger("distgnn")
    logger.info("%s", what)
    with _Ticker(logger, what, TICK_S, TICK_S):
        yield


def ticking(
    what: str, first_s: float = ANNOUNCE_S, say: Callable[[str], None] | None = None
) -> _Ticker:
    """`what ... N s` once the block has run `first_s`, then every TICK_S (silent if quick);
    logged, or handed to `say` (e.g. a console-only print)."""
    return _Ticker(logging.getLogger("distgnn"), what, first_s, TICK_S, say)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block; log `startup: <name> <s> s` at its end (also when it raises), and
    `startup: <name> ... N s` while it runs past ANNOUNCE_S (then every TICK_S)."""
    start = time.perf_counter()
    try:
        with _Ticker(log, f"startup: {name}", ANNOUNCE_S, TICK_S):
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
