"""Progress bars through a pipe: whole lines from the child, redrawn in place by the launcher.

A tqdm bar writes `\\r<bar>` and ends it only with the next update, so a reader splitting its
output into lines gets each state one update late and glued to log lines. A child of a job
(the launcher sets `PROGRESS_ENV`) gives tqdm a `BarLines` file instead: every state becomes one
line `PROGRESS_MARK<bar>\\n`, and an empty marked line ends the bar. The launcher's log pump
hands marked lines to a `BarView`: on a terminal the bar is redrawn in place as it moves, in
logs and pipes one whole line every `LOG_EVERY_S` (and the last state when the bar ends).
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import IO, Any

PROGRESS_ENV = "DISTGNN_PROGRESS_LINES"  # "1" in children whose output the launcher pumps
PROGRESS_MARK = "\x1b[progress]"  # starts every bar line; not a real terminal sequence
LOG_EVERY_S = 10.0  # a bar's state goes to logs (and non-terminal consoles) this often
CLEAR_LINE = "\r\x1b[K"
_VIEWS: weakref.WeakSet[BarView] = (
    weakref.WeakSet()
)  # the launcher's bar views (one per child): `clear_bars` wipes them


def clear_bars() -> None:
    """Wipe every bar drawn on the terminal, so the next line (a failure) starts on its own
    line instead of glued to a bar; a later state draws it again."""
    for view in list(_VIEWS):
        view.clear()


class BarLines:
    """A file for tqdm that turns each redraw (`\\r<bar>`) into one whole line on `out`.

    `mark`: prefix each line with `PROGRESS_MARK` (the launcher's pump reads them); an empty
    marked line ends the bar. Unmarked, it is a plain log of the bar's states.
    """

    def __init__(self, out: IO[str], mark: bool = True) -> None:
        self.out, self.mark = out, mark

    def write(self, text: str) -> int:
        state = text.replace("\r", "").strip()
        if state or self.mark:
            self.out.write((PROGRESS_MARK if self.mark else "") + state + "\n")
        return len(text)

    def flush(self) -> None:
        self.out.flush()


class BarView:
    """The launcher's side: where one child's bar states go (a terminal, a log, both).

    `show(state, echo)` returns the lines to write to the log now: a bar's state once it has
    run `every_s`, then every `every_s`, and its last state when it ends, if it ran that long
    (a bar over in a moment is summed up by the line the child logs after it). With `echo` it
    also redraws the bar on a terminal console, or prints those same lines on a console that
    is not one. `line(text)` prints an ordinary line over a drawn bar, then draws it again.
    """

    def __init__(self, console: IO[str], tty: bool, every_s: float | None = None) -> None:
        self.console, self.tty = console, tty
        self.every_s = LOG_EVERY_S if every_s is None else every_s
        self.drawn = ""  # the bar state on the terminal's last line ("" when none)
        self.pending = ""  # the newest state not yet logged
        self.active = False  # between a bar's first state and its end
        self.started = self.logged_at = 0.0  # this bar's first state, its last logged one
        self.lock = threading.Lock()
        _VIEWS.add(self)

    def clear(self) -> None:
        """Wipe this view's bar from the terminal (nothing if none is drawn)."""
        with self.lock:
            self._draw("")

    def show(self, state: str, echo: bool) -> list[str]:
        """Take one bar state ("" ends the bar); return the lines to write to the log."""
        with self.lock:
            now = time.monotonic()
            if state and not self.active:
                self.active, self.started, self.logged_at = True, now, now
            if not state:
                ran = self.active and now - self.started >= self.every_s
                out = [self.pending] if self.pending and ran else []
                self.pending, self.active = "", False
            elif now - self.logged_at >= self.every_s:
                out, self.pending, self.logged_at = [state], "", now
            else:
                out, self.pending = [], state
            if self.tty and (echo or not state):  # an ended bar is wiped, echoed or not
                self._draw(state)
            elif echo:
                for text in out:
                    self._write(text + "\n")
            return out

    def line(self, text: str) -> None:
        """Print an ordinary line on the console, keeping a drawn bar below it."""
        with self.lock:
            bar = self.drawn
            self._draw("")
            self._write(text + "\n")
            self._draw(bar)

    def _draw(self, state: str) -> None:
        if self.tty and state != self.drawn:
            self._write(CLEAR_LINE + state)
            self.drawn = state

    def _write(self, text: str) -> None:
        try:
            self.console.write(text)
            self.console.flush()
        except OSError:
            pass  # a closed or full console must not stop the draining


def bar_options(stream: IO[str], pumped: bool) -> dict[str, Any]:
    """tqdm's `file`/`mininterval`/`dynamic_ncols` for a bar on `stream`: marked lines every
    second when the launcher pumps this process's output (`pumped`), redraws on a terminal,
    else one plain line every `LOG_EVERY_S`."""
    if pumped:
        return {"file": BarLines(stream), "mininterval": 1.0}
    if stream.isatty():
        return {"file": stream, "mininterval": 0.1, "dynamic_ncols": True}
    return {"file": BarLines(stream, mark=False), "mininterval": LOG_EVERY_S}
