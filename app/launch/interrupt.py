"""The launcher's SIGTERM state: stdlib only, so `app.__main__` can import it first.

Every SIGTERM handler of the launcher sets `TERMINATED` and raises KeyboardInterrupt. An
interrupt raised asynchronously can be swallowed by library code during start-up, so the
launcher checks the flag again before each child starts and while it waits for them.
"""

from __future__ import annotations

import signal
import threading

TERMINATED = threading.Event()


def check_terminated() -> None:
    """Raise KeyboardInterrupt if a SIGTERM arrived, even one whose interrupt was swallowed."""
    if TERMINATED.is_set():
        raise KeyboardInterrupt(f"signal {signal.SIGTERM}")
