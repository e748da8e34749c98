"""A numba `numba:compile` listener that tells the user kernels are being compiled.

The first compilation in a process logs one line naming the cache; when a burst of
compilations ends (nothing compiled for `QUIET_S`), their count and total time are logged.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from numba.core import event

from app.jit import cache_root

QUIET_S = 1.0
SHOWN = 4  # kernel names in the line
log = logging.getLogger("distgnn")


class CompileWatch(event.Listener):
    def __init__(self, level: int) -> None:
        self.level, self.depth, self.seconds = level, 0, 0.0
        self.names: list[str] = []
        self.started = 0.0
        self.announced = False
        self.paused = False  # `app.jit.warm` says what it compiles itself
        self.timer: threading.Timer | None = None
        self.lock = threading.Lock()

    def on_start(self, event: event.Event) -> None:
        if self.paused:
            return
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
            self.depth += 1
            if self.depth > 1:  # a kernel's callees compile inside it
                return
            self.started = time.perf_counter()
            if not self.announced:
                self.announced = True
                log.log(
                    self.level, "compiling kernels (once per machine; cached in %s)", cache_root()
                )

    def on_end(self, event: event.Event) -> None:
        if self.paused:
            return
        with self.lock:
            self.depth -= 1
            if self.depth:
                return
            self.names.append(event.data["dispatcher"].py_func.__name__)
            self.seconds += time.perf_counter() - self.started
            self.timer = threading.Timer(QUIET_S, self.report)
            self.timer.daemon = True
            self.timer.start()

    def report(self) -> None:
        with self.lock:
            names, seconds = self.names, self.seconds
            self.names, self.seconds = [], 0.0
        if names:
            shown = ", ".join(sorted(set(names))[:SHOWN]) + (
                ", ..." if len(set(names)) > SHOWN else ""
            )
            log.log(self.level, "compiled %d kernels in %.1f s (%s)", len(names), seconds, shown)


_WATCH: CompileWatch | None = None


def register(level: int) -> CompileWatch:
    """The process's one watch (registered at the first call)."""
    global _WATCH
    if _WATCH is None:
        _WATCH = CompileWatch(level)
        event.register("numba:compile", _WATCH)
        atexit.register(_WATCH.report)  # a burst still open when the process ends
    return _WATCH


@contextmanager
def paused() -> Iterator[None]:
    """No announcement for what compiles in the block (its caller reports it)."""
    watch = _WATCH
    if watch is None:
        yield
        return
    watch.paused = True
    try:
        yield
    finally:
        watch.paused = False
