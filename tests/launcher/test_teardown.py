"""Run teardown (issue 28, finding 6): every FAILED/KILLED run says why in its `error` tag, and
a run whose store could not be written is ended by the next job (launcher.pid is kept).

Real SQLite stores and real processes: a 2-node job whose sampler is SIGKILLed, and a launcher
process whose store breaks before it can end its run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.launch.orphans import PID_FILE, end_orphaned_runs
from app.launch.spawn import JobFailed
from app.tracking.mlflow import MlflowTracker
from tests.helpers.jobs import REPO, SMOKE, child_pid, data_paths, training_launcher


def test_culprit_is_the_childs_error_line():
    tail = [
        "epoch 0: loss=2.3",
        "Traceback (most recent call last):",
        "  File x",
        "ValueError: bad",
    ]
    err = JobFailed("trainer0-1", 1, tail, Path("/j/logs/trainer0-1.log"))
    assert err.culprit == "trainer0-1 failed (exit code 1): ValueError: bad"
    assert JobFailed("sampler1-0-0", -9, [], Path("l")).culprit == (
        "sampler1-0-0 failed (killed by signal 9)"
    )


@pytest.mark.dist
@pytest.mark.long  # test_dist_faults names a killed sampler, test_console a child's culprit line
def test_killed_sampler_fails_the_run_with_the_culprit_line(made, tmp_path):  # noqa: F811
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    job = tmp_path / "run"
    args = [
        *SMOKE, *data_paths(made), f"partition.root={made / 'P'}", f"hydra.run.dir={job}",
        "mlflow.enabled=true", f"mlflow.tracking_uri={uri}", "train.epochs=50",
        "loader.num_workers=1", "cluster.shutdown_timeout_s=3",
    ]  # fmt: skip
    with training_launcher(args, job, ready=(job / "mlflow_run_id").exists) as launcher:
        os.kill(child_pid(launcher, "sampler", "1"), signal.SIGKILL)
        _, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 1, err[-2000:]
    run = MlflowClient(uri).get_run((job / "mlflow_run_id").read_text().strip())
    assert run.info.status == "FAILED"
    assert run.data.tags["error"].startswith("sampler1-0-0 failed (killed by signal 9)"), run.data
    assert not (job / PID_FILE).exists()


BROKEN_STORE = """
import sys
from pathlib import Path
from app.config import Config
from app.launch.job import finish_tracking
from app.launch.orphans import write_pid_file
cfg = Config()
cfg.mlflow.enabled, cfg.mlflow.tracking_uri = True, sys.argv[1]
job, db = Path(sys.argv[2]), Path(sys.argv[3])
write_pid_file(job)
db.rename(db.with_name("away.db"))  # the store can no longer be written
db.mkdir()
finish_tracking(cfg, job, "FAILED", "trainer0-0 failed (exit code 1): RuntimeError: boom")
"""


@pytest.mark.dist
def test_run_whose_store_could_not_be_written_is_ended_by_the_next_job(tmp_path):
    from mlflow.tracking import MlflowClient

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    job = tmp_path / "out" / "runs" / "first"
    job.mkdir(parents=True)
    run_id = MlflowTracker(uri, "teardown").start(None, tags={"job_dir": str(job)})
    proc = subprocess.run(
        [sys.executable, "-c", BROKEN_STORE, uri, str(job), str(db)], cwd=REPO,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "stays, so the next job ends it" in proc.stderr
    rec = json.loads((job / PID_FILE).read_text())
    assert rec["status"] == "FAILED" and "boom" in rec["error"]
    db.rmdir()  # the disk has room again
    (tmp_path / "away.db").rename(db)
    assert MlflowClient(uri).get_run(run_id).info.status == "RUNNING"
    assert end_orphaned_runs(tmp_path / "out", uri, tmp_path / "out" / "runs" / "next") == [run_id]
    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == "trainer0-0 failed (exit code 1): RuntimeError: boom"
    assert not (job / PID_FILE).exists()


WORKER_WITH_STUCK_THREAD = """
import runpy, threading, time
threading.Thread(target=time.sleep, args=(600,)).start()  # a stuck non-daemon RPC thread
time.sleep(1.0)  # the launcher's end of the pipes is gone by now
runpy.run_module("app.launch.worker", run_name="__main__")
"""


@pytest.mark.dist
def test_worker_exits_even_if_its_output_pipe_is_gone(tmp_path):
    """Issue 28, finding 9: with the launcher's end of stdout/stderr closed, the worker's last
    print raises BrokenPipeError; that must not skip `os._exit` and leave the worker to its
    non-daemon threads (a sampler outlived its job by >= 93 s)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTGNN_")}
    env["PYTHONUNBUFFERED"] = "1"  # as the launcher starts its children: every print writes
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER_WITH_STUCK_THREAD], cwd=REPO, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    proc.stdout.close()
    proc.stderr.close()
    try:
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 1  # EXIT_ERROR, by os._exit: not stuck behind the thread


@pytest.mark.dist
@pytest.mark.long  # a whole job: test_dist_faults proves the sampler's part in make test
def test_sigint_to_a_sampler_stops_the_job_as_fast_as_sigterm(made, tmp_path):  # noqa: F811
    """Issue 28, finding 7: SIGINT to a sampler used to log "stopped by signal" and serve on
    through a graceful RPC shutdown bounded by cluster.init_timeout_s (60 s here)."""
    job = tmp_path / "run"
    args = [
        *SMOKE, *data_paths(made), f"partition.root={made / 'P'}", f"hydra.run.dir={job}",
        "train.epochs=200", "loader.num_workers=1", "cluster.shutdown_timeout_s=3",
        "cluster.init_timeout_s=60",
    ]  # fmt: skip
    with training_launcher(args, job) as launcher:
        os.kill(child_pid(launcher, "sampler", "1"), signal.SIGINT)
        sent = time.monotonic()
        _, err = launcher.communicate(timeout=120)
        took = time.monotonic() - sent
    assert launcher.returncode == 1, err[-2000:]
    assert "sampler1-0-0 failed" in err, err[-2000:]
    # As on SIGTERM: the sampler leaves RPC at once (its SIGTERM handler ran), not through
    # the graceful shutdown that waits on its peers (up to init_timeout_s; 27-219 s seen).
    sampler_log = (job / "logs" / "sampler1-0-0.log").read_text()
    assert "exiting (after a failure)" in sampler_log, sampler_log[-1500:]
    assert "stopped by signal" not in sampler_log
    assert took < 20, f"the job took {took:.0f} s to stop after SIGINT to a sampler"
