"""The launcher's SIGTERM state and its outcome line: stdlib only, so `app.__main__` can
import it first.

Every SIGTERM handler of the launcher sets `TERMINATED` and raises KeyboardInterrupt. An
interrupt raised asynchronously can be swallowed by library code during start-up, so the
launcher checks the flag again before each child starts and while it waits for them.

The line that says how a job ended (`job failed: …`, `interrupted (Ctrl-C): …`) is printed by
`say_outcome` as soon as the children are gone, before the MLflow bookkeeping; the CLI's exit
path then prints nothing more for the same exception.
"""

from __future__ import annotations

import signal
import sys
import threading

TERMINATED = threading.Event()
_said: list[object] = []  # the exception whose outcome line is already on the console


def say_outcome(err: object, line: str) -> None:
    """Print `line` on stderr, once for `err` (a sweep's next failure gets its own line)."""
    if not said(err):
        from app.tracking.progress_lines import clear_bars

        clear_bars()  # a bar drawn on the terminal: the line starts on a line of its own
        print(line, file=sys.stderr, flush=True)
        _said[:] = [err]


def said(err: object) -> bool:
    """Whether `say_outcome` already printed `err`'s line."""
    return bool(_said) and _said[0] is err


def stop_line(err: KeyboardInterrupt) -> str:
    """The outcome line of a job stopped by Ctrl-C or SIGTERM (its children all stopped)."""
    terminated = bool(err.args) and err.args[0] == f"signal {signal.SIGTERM}"
    how = "terminated (SIGTERM)" if terminated else "interrupted (Ctrl-C)"
    return f"{how}: every process of the job was stopped"


def check_terminated() -> None:
    """Raise KeyboardInterrupt if a SIGTERM arrived, even one whose interrupt was swallowed."""
    if TERMINATED.is_set():
        raise KeyboardInterrupt(f"signal {signal.SIGTERM}")
