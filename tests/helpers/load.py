"""Wall-clock budgets that stretch with the machine's load.

A fixed second count in a test is a guess about the machine: a suite beside other work on 2
cores (load 10-28) runs every step many times slower, and a bound that holds on a quiet machine
fails there although nothing is wrong. A `Budget` is the time the step takes on a quiet machine,
multiplied by the highest load factor (1-minute load average per core, at least 1) seen while
waiting.
"""

from __future__ import annotations

import os
import time


def load_factor() -> float:
    """How many times oversubscribed this machine's cores are now (at least 1)."""
    return max(1.0, os.getloadavg()[0] / len(os.sched_getaffinity(0)))


def scaled(seconds: float) -> float:
    """`seconds` on a quiet machine, at the present load."""
    return seconds * load_factor()


class Budget:
    """`seconds` on a quiet machine, stretched by the highest load seen while it runs."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.start, self.factor = seconds, time.monotonic(), load_factor()

    def left(self) -> float:
        self.factor = max(self.factor, load_factor())
        return self.start + self.seconds * self.factor - time.monotonic()

    def describe(self) -> str:
        return f"{self.seconds:g} s at load factor {self.factor:.1f}"
