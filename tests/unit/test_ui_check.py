"""`make ui-check` says what it needs before it starts anything."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.jobs import REPO


@pytest.mark.dist
def test_ui_check_without_chromium_fails_first_and_starts_no_server(tmp_path):
    out = tmp_path / "ui-check"
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # no chromium on it
    cmd = [sys.executable, "-m", "app.tracking.ui", "check", "--store", str(tmp_path / "x.db")]
    proc = subprocess.run(
        [*cmd, "--out", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "ui-check: no chromium binary: apt-get install chromium (Debian) first"
    )
    assert not out.exists()  # no server was started (its log would be there)


def test_newest_run_of_a_sweep_is_named_by_its_parent(tmp_path):
    """The runs table shows a sweep's parent with its jobs collapsed under it: ui-check looks
    for the parent's name when the newest run is one of the jobs."""
    from mlflow.tracking import MlflowClient

    from app.tracking.ui import newest_experiment

    db = tmp_path / "mlflow.db"
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.create_experiment("sweeps")
    parent = client.create_run(exp, run_name="sweep-smoke")
    client.create_run(exp, run_name="smoke-job-1", tags={"mlflow.parentRunId": parent.info.run_id})
    assert newest_experiment(db) == (exp, "sweep-smoke")
