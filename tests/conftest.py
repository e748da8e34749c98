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


# A job that printed nothing for this long is stuck, whatever `timeout` a test gave: start-up
# (importing torch) is silent, and takes a minute or more on a 2-core machine at load 10.
SILENCE_FLOOR_S = 180.0


def run_app(*args: str, timeout: float = 60, env: dict | None = None, cwd: Path = REPO):
    """Run `python -m app ARGS` as a real process; returns the CompletedProcess.

    The wait follows the job's progress: it is stopped (and `subprocess.TimeoutExpired`
    raised) only after `max(timeout, SILENCE_FLOOR_S)` seconds without a byte of output, so a
    loaded machine makes a job slower, not a test red.
    """
    import subprocess

    full_env = {**os.environ, **(env or {})}
    proc = subprocess.Popen(
        [PYTHON, "-m", "app", *args],
        cwd=cwd,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = _drain_while_alive(proc, max(timeout, SILENCE_FLOOR_S))
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
    )


def _drain_while_alive(proc, silence_s: float) -> tuple[bytes, bytes]:
    """Read `proc`'s stdout and stderr to the end; kill it after `silence_s` without output."""
    import subprocess
    import threading
    import time

    chunks: dict[int, list[bytes]] = {1: [], 2: []}
    last = [time.monotonic()]

    def read(stream, key: int) -> None:
        for data in iter(lambda: stream.read1(65536), b""):
            chunks[key].append(data)
            last[0] = time.monotonic()

    readers = [
        threading.Thread(target=read, args=(proc.stdout, 1), daemon=True),
        threading.Thread(target=read, args=(proc.stderr, 2), daemon=True),
    ]
    for r in readers:
        r.start()
    while proc.poll() is None:
        if time.monotonic() - last[0] > silence_s:
            proc.kill()
            proc.wait()
            raise subprocess.TimeoutExpired(
                proc.args, silence_s, b"".join(chunks[1]), b"".join(chunks[2])
            )
        time.sleep(0.2)
    for r in readers:
        r.join()
    return b"".join(chunks[1]), b"".join(chunks[2])
