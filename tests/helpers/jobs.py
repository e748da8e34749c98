"""Real processes for the tests: `python -m app` runs, and waits that follow a job's progress
instead of guessing a wall-clock bound."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from tests.helpers.load import load_factor

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
# the 2-node smoke job, untracked: what most launcher-level tests run
SMOKE = ("+experiment=smoke", "cluster.num_nodes=2", "mlflow.enabled=false")


def default_sigint() -> None:
    """`preexec_fn` for launchers a test interrupts: Ctrl-C as a terminal delivers it.

    A shell's background job (`cmd &`, as CI runners may start the suite) inherits SIGINT
    ignored, and Python keeps an inherited ignore: the launcher would never see the signal.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# A job that printed nothing for this long is stuck, whatever `timeout` a test gave: start-up
# (importing torch) is silent, and takes a minute or more on a 2-core machine at load 10.
SILENCE_FLOOR_S = 180.0


STALL_S = 90.0  # a job whose processes used no CPU for this long is hung, not slow
WAIT_CAP_S = 900.0  # a last bound, for a job that spins without getting anywhere


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process `pid` and its live descendants."""
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


class Console:
    """When each line of a job's console (stdout and stderr together) arrived, and the highest
    load factor (`tests.helpers.load`) seen meanwhile: `longest_gap()` is the longest silence,
    from the start to the first line, between lines, or from the last line to the exit."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.lines: list[tuple[float, str]] = []
        self.end = self.start
        self.factor = load_factor()
        self.lock = threading.Lock()

    def add(self, data: bytes) -> None:
        now = time.monotonic()
        with self.lock:
            self.factor = max(self.factor, load_factor())  # the job's own processes load it
            for text in data.decode(errors="replace").replace("\r", "\n").split("\n")[:-1]:
                self.lines.append((now, text))

    def longest_gap(self) -> tuple[float, str]:
        """(seconds, the line that ended the silence or "<exit>")."""
        times = [(self.start, "<start>"), *self.lines, (self.end, "<exit>")]
        return max(
            (b[0] - a[0], f"{a[1]!r} -> {b[1]!r}") for a, b in zip(times, times[1:], strict=False)
        )


def run_app(
    *args: str,
    timeout: float = 60,
    env: dict | None = None,
    cwd: Path = REPO,
    console: Console | None = None,
):
    """Run `python -m app ARGS` as a real process; returns the CompletedProcess.

    The wait follows the job's progress: it is stopped (and `subprocess.TimeoutExpired`
    raised) only after `max(timeout, SILENCE_FLOOR_S)` seconds without a byte of output, so a
    loaded machine makes a job slower, not a test red. `console` records when each line came.
    """
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.Popen(
        [PYTHON, "-m", "app", *args],
        cwd=cwd,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = _drain_while_alive(proc, max(timeout, SILENCE_FLOOR_S), console)
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
    )


def _drain_while_alive(
    proc, silence_s: float, console: Console | None = None
) -> tuple[bytes, bytes]:
    """Read `proc`'s stdout and stderr to the end; kill it after `silence_s` without output."""
    chunks: dict[int, list[bytes]] = {1: [], 2: []}
    last = [time.monotonic()]

    def read(stream, key: int) -> None:
        for data in iter(lambda: stream.read1(65536), b""):
            chunks[key].append(data)
            last[0] = time.monotonic()
            if console is not None:
                console.add(data)

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
        if console is not None:
            console.factor = max(console.factor, load_factor())
        time.sleep(0.2)
    if console is not None:
        console.end = time.monotonic()
    for r in readers:
        r.join()
    return b"".join(chunks[1]), b"".join(chunks[2])


def data_paths(out: Path) -> list[str]:
    """The overrides that keep a job's outputs and its dataset in `out`."""
    return [f"output_dir={out}", f"dataset.root={out / 'data'}"]


def out_paths(out: Path) -> list[str]:
    """`data_paths`, and the job's partition at `out/P`."""
    return [*data_paths(out), f"partition.root={out / 'P'}"]


@contextmanager
def training_launcher(
    args: list[str], job: Path, ready: Callable[[], bool] = lambda: True
) -> Iterator[subprocess.Popen]:
    """`python -m app ARGS` once its rank-0 trainer has logged an epoch (and `ready()` holds),
    waiting as long as the job makes progress; on the way out every process it started is
    killed."""
    launcher = subprocess.Popen(
        [sys.executable, "-m", "app", *args], cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        log = job / "logs" / "trainer0-0.log"

        def trained() -> bool:
            return ready() and "epoch" in (log.read_text() if log.exists() else "")

        wait_for_job(trained, launcher, "job did not train", lambda: stop_and_tell(launcher))
        yield launcher
    finally:
        if launcher.poll() is None:
            for p in psutil.Process(launcher.pid).children(recursive=True):
                p.kill()
            launcher.kill()
            launcher.wait()


def child_pid(launcher: subprocess.Popen, role: str, node: str) -> int | None:
    """Pid of the launcher's child with DISTGNN_ROLE=role on node `node`, if started."""
    for p in psutil.Process(launcher.pid).children(recursive=True):
        try:
            env = p.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        worker = "app.launch.worker" in " ".join(p.cmdline())  # not a helper it started
        if worker and env.get("DISTGNN_ROLE") == role and env.get("DISTGNN_NODE_RANK") == node:
            return p.pid
    return None


def partitioned(out: Path, *job: str) -> Path:
    """`out`, holding the dataset of `job` (overrides) and its partition at `out/P`."""
    proc = run_app("task=partition", *job, *out_paths(out), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out
