"""Shared fixtures: Hydra composition of the project's configs, repo paths."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable

# Tests run on 2 shared cores: one intra-op thread per process keeps runs predictable.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def compose():
    """compose(*overrides) -> validated Config, through the same files as `python -m app`."""
    from app.config import compose_config

    return lambda *overrides: compose_config(list(overrides))


def default_sigint() -> None:
    """`preexec_fn` for launchers a test interrupts: Ctrl-C as a terminal delivers it.

    A shell's background job (`cmd &`, as CI runners may start the suite) inherits SIGINT
    ignored, and Python keeps an inherited ignore: the launcher would never see the signal.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_app(*args: str, timeout: float = 60, env: dict | None = None, cwd: Path = REPO):
    """Run `python -m app ARGS` as a real process; returns the CompletedProcess."""
    import subprocess

    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [PYTHON, "-m", "app", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
