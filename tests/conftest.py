"""Shared fixtures: Hydra composition of the project's configs, repo paths."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable

# Tests run on 2 shared cores: one intra-op thread per process keeps runs predictable.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Tests write only under temporary dirs: a run dir that appears in the project's own
# outputs/ during the session (a job started without `output_dir=`) fails the session.
PROJECT_RUN_DIRS = (REPO / "outputs" / "runs", REPO / "outputs" / "multirun")
_RUNS_BEFORE = pytest.StashKey[set]()


def _project_runs() -> set[str]:
    return {str(p) for d in PROJECT_RUN_DIRS if d.is_dir() for p in d.iterdir()}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.stash[_RUNS_BEFORE] = _project_runs()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    new = sorted(_project_runs() - session.stash.get(_RUNS_BEFORE, set()))
    if new:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        reporter.write("\n")
        reporter.write_sep("=", "tests wrote into the project's outputs/ (give output_dir=)")
        reporter.write_line(" ".join(new))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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


STALL_S = 90.0  # a job whose processes used no CPU for this long is hung, not slow
WAIT_CAP_S = 900.0  # a last bound, for a job that spins without getting anywhere


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process `pid` and its live descendants."""
    import psutil

    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


def wait_for_job(
    cond, proc, what: str, describe=None, stall_s: float = STALL_S, poll_s: float = 0.02
) -> None:
    """Wait until `cond()` holds while job `proc` (a Popen) makes progress.

    Not a wall-clock guess: on a loaded 2-core host a job's start-up takes anywhere from 10 s
    to minutes. It fails when the job ends first, or when its processes used no CPU for
    `stall_s` (hung), or after WAIT_CAP_S in all; `what` names the awaited event, and
    `describe()` (e.g. killing the job and reading its stderr) is appended to the failure.
    """
    import time

    def fail(why: str) -> None:
        pytest.fail(f"{what}: {why}" + (f": {describe()}" if describe else ""))

    start = last_change = checked = time.monotonic()
    last_cpu = -1.0
    while not cond():  # every poll_s: a short-lived state (a mid-epoch checkpoint) is seen
        now = time.monotonic()
        if proc.poll() is not None:
            fail(f"the job ended first (exit {proc.returncode})")
        if now - checked >= 1.0:  # the process tree's CPU time: once a second (psutil is slow)
            checked, cpu = now, _tree_cpu_s(proc.pid)
            if abs(cpu - last_cpu) > 0.05:
                last_cpu, last_change = cpu, now
            elif now - last_change > stall_s:
                fail(f"the job used no CPU for {stall_s:.0f} s (hung)")
        if now - start > WAIT_CAP_S:
            fail(f"not after {WAIT_CAP_S:.0f} s although the job kept running")
        time.sleep(poll_s)


def stop_and_tell(proc) -> str:
    """Kill job `proc` (a Popen) and every process it started; the tail of its output."""
    import psutil

    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        kids = []
    for p in [*kids, proc]:
        try:
            p.kill()
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
    out, err = proc.communicate(timeout=30)
    return str(err if err is not None else out)[-2000:]


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's syntax: 200k, 2m) mounted at `path` for the block, unmounted
    after; the test is skipped where mounting is not permitted (not root)."""
    import subprocess

    path.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]
    if subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("needs permission to mount a small tmpfs")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


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
