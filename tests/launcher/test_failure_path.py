"""After a fault, the culprit line first (issue 37, items 4 and 5).

The launcher prints `job failed: …` as soon as its children are gone, and does the MLflow
bookkeeping (the run's `error` tag, its status, the logs' upload) after, each tracking call
bounded; the culprit line carries a child's last line only when it is an error line; a
tracking server nothing answers on is one line at start, before any work.

Real processes, real SQLite stores; the unreachable server is a closed port on 127.0.0.1, the
silent one a socket that accepts and never answers.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from app.config import Config, ConfigError
from app.launch.job import _close_tracking
from app.launch.spawn import JobFailed
from app.tracking.http_store import FAILURE_PATH_TIMEOUT_S, check_server
from tests.helpers.jobs import (
    REPO,
    SMOKE,
    child_pid,
    data_paths,
    run_app,
    stop_and_tell,
    training_launcher,
    wait_for_job,
)
from tests.helpers.ports import free_port


@pytest.mark.parametrize(
    "last",
    [
        "12:00:01 I distgnn.rpc: sampler1-0-0 joined the RPC group",
        "12:00:07 I distgnn.train: layer-wise evaluation: 2 layers, 100 nodes in 0.11 s",
        "epoch 3: loss=0.71",
    ],
)
def test_a_last_line_that_is_not_an_error_is_not_the_reason(last):
    err = JobFailed("sampler1-0-0", -9, ["12:00:00 I distgnn: started", last], Path("l"))
    assert err.culprit == "sampler1-0-0 failed (killed by signal 9)"


@pytest.mark.parametrize(
    ("last", "reason"),
    [
        ("12:00:02 E distgnn.train: loss is nan at epoch 2, step 7", "loss is nan"),
        ("RuntimeError: connection reset by peer", "RuntimeError: connection reset"),
        ("[E socket.cpp:610] gloo: connection closed by peer", "connection closed"),
    ],
)
def test_an_error_line_is_the_reason(last, reason):
    err = JobFailed("trainer0-1", 1, ["12:00:00 I distgnn: started", last], Path("l"))
    assert err.culprit.startswith("trainer0-1 failed (exit code 1): ") and reason in err.culprit


def _closed_port() -> int:
    return free_port()  # free now: nothing listens on it


def test_a_tracking_server_nothing_answers_on_is_one_line_within_seconds():
    uri = f"http://alice:PW9@127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(ConfigError) as info:
        check_server(uri)
    assert time.monotonic() - start < 5.0
    line = str(info.value)
    assert "no tracking server at 127.0.0.1" in line and "\n" not in line and "PW9" not in line


def test_tracking_calls_on_the_failure_path_are_bounded(tmp_path):
    """A server that accepts connections and never answers (a hung or cut-off one): ending
    the failed job's run gives up after one bounded call, where MLflow's defaults (8 tries of
    120 s, with backoff) would hold the launcher for many minutes."""
    import mlflow  # noqa: F401  (imported before the clock starts)

    silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nobody answers
    try:
        cfg = Config()
        cfg.mlflow.enabled = True
        cfg.mlflow.tracking_uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        (tmp_path / "mlflow_run_id").write_text("0123abcd")
        start = time.monotonic()
        ended = _close_tracking(cfg, tmp_path, "FAILED", "trainer0-0 failed (exit code 1)")
        took = time.monotonic() - start
    finally:
        silent.close()
    assert not ended  # launcher.pid stays: the next job ends the run
    assert took < 3 * FAILURE_PATH_TIMEOUT_S, f"{took:.1f} s"


@pytest.mark.dist
def test_an_unreachable_tracking_server_fails_the_job_at_start(tmp_path):
    port = _closed_port()
    job = tmp_path / "run"
    proc = run_app(
        *SMOKE, *data_paths(tmp_path), f"hydra.run.dir={job}", "mlflow.enabled=true",
        f"mlflow.tracking_uri=http://127.0.0.1:{port}",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if "tracking" in line]
    assert len(lines) == 1 and lines[0].startswith("config error: "), proc.stderr[-2000:]
    assert f"no tracking server at 127.0.0.1:{port}" in lines[0]
    assert not (job / "logs").exists() and not (tmp_path / "data").exists()  # no work done


def _stamped_lines(stream, lines: list[tuple[float, str]]) -> threading.Thread:
    """A thread appending (arrival time, line) for every line of `stream`."""

    def read() -> None:
        for line in iter(stream.readline, ""):
            lines.append((time.monotonic(), line.rstrip("\n")))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _children_gone(pid: int) -> float:
    """When the last (non-zombie) descendant of `pid` was seen gone, polled every 20 ms."""
    while True:
        try:
            kids = psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return time.monotonic()
        alive = []
        for p in kids:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return time.monotonic()
        time.sleep(0.02)


@pytest.mark.dist
@pytest.mark.long
def test_the_culprit_line_comes_within_2_s_of_the_childrens_end(made, tmp_path):
    """A sampler SIGKILLed mid-epoch: the launcher stops the other children, prints the
    culprit at once, then ends the MLflow run FAILED with that line as its `error` tag (the
    sampler's last line, not an error, is not appended). Measured from the test's own times:
    when it saw the last child gone, when the culprit line arrived."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    job = tmp_path / "run"
    args = [
        *SMOKE, *data_paths(made), f"partition.root={made / 'P'}", f"hydra.run.dir={job}",
        "mlflow.enabled=true", f"mlflow.tracking_uri={uri}", "train.epochs=50",
        "loader.num_workers=1", "cluster.shutdown_timeout_s=3",
    ]  # fmt: skip
    lines: list[tuple[float, str]] = []
    with training_launcher(args, job, ready=(job / "mlflow_run_id").exists) as launcher:
        reader = _stamped_lines(launcher.stderr, lines)
        os.kill(child_pid(launcher, "sampler", "1"), signal.SIGKILL)
        gone = _children_gone(launcher.pid)
        launcher.wait(timeout=300)
        reader.join(timeout=30)
    text = "\n".join(line for _, line in lines)
    assert launcher.returncode == 1, text[-2000:]
    culprit = [(t, line) for t, line in lines if line.startswith("job failed: ")]
    assert len(culprit) == 1, text[-2000:]
    at, line = culprit[0]
    assert at - gone < 2.0, f"culprit line {at - gone:.2f} s after the children's end"
    assert line.startswith("job failed: sampler1-0-0 failed (killed by signal 9); log "), line
    run = MlflowClient(uri).get_run((job / "mlflow_run_id").read_text().strip())
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == "sampler1-0-0 failed (killed by signal 9)", run.data.tags


def _culprit(stderr: str) -> str:
    """The culprit of a launcher's `job failed: <culprit>[; log <path>]` line."""
    line = next(x for x in stderr.splitlines() if x.startswith("job failed: "))
    return line.removeprefix("job failed: ").rsplit("; log ", 1)[0]


@pytest.mark.dist
@pytest.mark.long
def test_only_node_0_ends_the_run_another_node_adds_its_view(made, tmp_path):
    """Two env-mode launchers on 127.0.0.1 sharing the job dir and a SQLite store, as two
    hosts on a shared file system. Node 1's trainer is killed while its launcher is stopped,
    so node 0 fails first and node 1's launcher ends last: the run keeps node 0's culprit as
    its `error` tag; node 1's own view is its `node1.error` / `node1.status` tags."""
    from mlflow.tracking import MlflowClient

    from app.launch.plan import free_ports

    (base,) = free_ports(1)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    job = tmp_path / "run"
    args = [
        *SMOKE, "cluster=env", *data_paths(made), f"partition.root={made / 'P'}",
        f"hydra.run.dir={job}", "mlflow.enabled=true", f"mlflow.tracking_uri={uri}",
        "train.epochs=50", "loader.num_workers=1", "cluster.shutdown_timeout_s=3",
    ]  # fmt: skip
    env = {**os.environ, "GROUP_WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(base)}
    launchers = [
        subprocess.Popen(
            [sys.executable, "-m", "app", *args],
            cwd=REPO,
            env={**env, "GROUP_RANK": str(n)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for n in (0, 1)
    ]
    node0, node1 = launchers
    log0 = job / "logs" / "trainer0-0.log"
    try:
        wait_for_job(
            lambda: (job / "mlflow_run_id").exists() and "epoch" in _text(log0),
            node0, "job did not train", lambda: stop_and_tell(node0),
        )  # fmt: skip
        node1.send_signal(signal.SIGSTOP)
        os.kill(child_pid(node1, "trainer", "1"), signal.SIGKILL)
        _, err0 = node0.communicate(timeout=300)
        node1.send_signal(signal.SIGCONT)
        _, err1 = node1.communicate(timeout=300)
    finally:
        for launcher in launchers:
            if launcher.poll() is None:
                launcher.send_signal(signal.SIGCONT)
                stop_and_tell(launcher)
    assert node0.returncode == 1 and node1.returncode == 1, (err0[-1500:], err1[-1500:])
    run = MlflowClient(uri).get_run((job / "mlflow_run_id").read_text().strip())
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == _culprit(err0), (run.data.tags, err0[-1500:])
    assert run.data.tags["node1.error"] == _culprit(err1), (run.data.tags, err1[-1500:])
    assert run.data.tags["node1.status"] == "FAILED"


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""
