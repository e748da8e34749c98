"""What the launcher says while its children are quiet: no silent minute on the console.

Between spawning a job's processes and their first line, each imports torch (tens of seconds on
a busy machine), and after training they evaluate, close the MLflow run and exit. `JobConsole`
watches the children's output as the log pump sees it (`Heard`): while nothing reached the
console for `QUIET_S`, it says what the job is doing: how many processes have started, then
which ones it is waiting for and the last line one of them printed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger("distgnn")

QUIET_S = 4.0  # console silence after which the launcher says what it waits for
POLL_S = 0.5


@dataclass
class Heard:
    """One child's output as its pump saw it: whether it has printed yet (it is up: imports
    done), and when a line of it last reached the console (echoed children only)."""

    up: threading.Event = field(default_factory=threading.Event)
    echoed_at: float = 0.0

    def line(self, echoed: bool) -> None:
        self.up.set()
        if echoed:
            self.echoed_at = time.monotonic()


@dataclass
class Quiet:
    """One child as `JobConsole` sees it: its name, what it printed, whether it still runs, and
    its last line."""

    name: str
    heard: Heard
    running: Callable[[], bool]
    last_line: Callable[[], str]


class JobConsole:
    """A daemon thread that fills console silences of `QUIET_S` with the job's state."""

    def __init__(self, children: Sequence[Quiet], started: float, quiet_s: float = QUIET_S) -> None:
        self.children, self.quiet_s = children, quiet_s
        self.start = self.said_at = started
        self.all_up = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="job-console", daemon=True)

    def __enter__(self) -> JobConsole:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=2)

    def _run(self) -> None:
        while not self.done.wait(POLL_S):
            line = self.state_line(time.monotonic())
            if line:
                log.info("%s", line)

    @staticmethod
    def starting(n: int) -> float:
        """Say that `n` processes are being started; the time they started from."""
        log.info("starting %d process%s (each imports torch first)", n, "es" if n != 1 else "")
        return time.monotonic()

    def state_line(self, now: float) -> str:
        """The line to say at `now`, or "" while the console was not quiet for `quiet_s`."""
        up = sum(c.heard.up.is_set() for c in self.children)
        n = len(self.children)
        if up == n and not self.all_up:
            self.all_up = True
            self.said_at = now
            return f"{n} of {n} processes up after {now - self.start:.0f} s"
        heard = max((c.heard.echoed_at for c in self.children), default=0.0)
        if now - max(self.said_at, heard) < self.quiet_s:
            return ""
        self.said_at = now
        if up < n:
            return f"starting {n} processes: {up} of {n} up (importing torch) ... {now - self.start:.0f} s"
        running = [c for c in self.children if c.running()]
        if not running:
            return ""
        names = ", ".join(c.name for c in running)
        last = running[0].last_line()
        said = f"; {running[0].name} last said: {last[:100]}" if last else ""
        return f"waiting for {names} ... {now - self.start:.0f} s{said}"
