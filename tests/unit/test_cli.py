"""The user's path: `python -m app ...` as a real process, results read back from MLflow."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.helpers.jobs import REPO, run_app


def _runs(tmp_path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("distgnn")
    return client, client.search_runs([exp.experiment_id])


@pytest.mark.dist
def test_partition_task_writes_then_reuses_and_logs(tmp_path):
    args = [
        "task=partition",
        "+experiment=smoke",
        "cluster.num_nodes=2",
        f"output_dir={tmp_path}",
        f"dataset.root={tmp_path / 'data'}",
    ]
    first = run_app(*args, timeout=180)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "partition written to" in first.stdout
    (root,) = (tmp_path / "partitions").iterdir()
    assert (root / "META.json").exists() and (root / "part_1" / "graph.pt").exists()
    second = run_app(*args, timeout=180)
    assert second.returncode == 0 and "is up to date" in second.stdout
    _, runs = _runs(tmp_path)
    assert [r.info.status for r in runs] == ["FINISHED", "FINISHED"]
    assert 0 < float(runs[0].data.params["partition_stats.edge_cut_frac"]) < 0.5


@pytest.mark.dist
def test_single_process_training_learns_and_logs(tmp_path):
    proc = run_app(
        "+experiment=smoke",
        f"output_dir={tmp_path}",
        f"dataset.root={tmp_path / 'data'}",
        "train.epochs=12",
        "train.lr=0.01",
        "dataset.train_frac=0.4",
        "loader.batch_size=128",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    client, (run,) = _runs(tmp_path)
    assert run.info.status == "FINISHED"
    for name in [
        "loss",
        "train_acc",
        "val_acc",
        "test_acc",
        "epoch_time_s",
        "seeds_per_s",
        "sampled_edges_per_s",
    ]:
        history = client.get_metric_history(run.info.run_id, name)
        assert [m.step for m in history] == list(range(12)), name
    assert run.data.params["model.name"] == "sage" and run.data.params["train.epochs"] == "12"
    (data_file,) = (tmp_path / "data").glob("*/data.pt")
    y = torch.load(data_file, weights_only=True, mmap=True)["y"]
    majority = torch.bincount(y).max().item() / len(y)
    assert run.data.metrics["test_acc"] >= 2 * majority


@pytest.mark.dist
@pytest.mark.parametrize("bad", ["dataset.num_nodes=0", "model.num_layers=3"])
def test_bad_config_fails_before_any_work(tmp_path, bad):
    proc = run_app("+experiment=smoke", f"output_dir={tmp_path}", bad, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("config error: ")
    assert not (tmp_path / "mlflow.db").exists()


LATE_SIGTERM = """
import os, signal, sys, time
import app.__main__ as m
signal.signal(signal.SIGTERM, m._on_sigterm)
sys.argv = ["app", "--help"]
try:
    m.run_cli(["--help"])
except SystemExit:
    pass
os.kill(os.getpid(), signal.SIGTERM)  # the job is over: e.g. during interpreter shutdown
time.sleep(10)
"""


@pytest.mark.dist
def test_sigterm_after_the_job_ended_exits_143():
    """A SIGTERM once `run_cli` returned exits 143 at once; it used to raise KeyboardInterrupt
    outside every handler, so the interpreter died by SIGINT (exit -2, a traceback)."""
    proc = subprocess.run(
        [sys.executable, "-c", LATE_SIGTERM], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 143, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr


@pytest.mark.dist
def test_debug_fast_runs_one_short_epoch_without_mlflow(tmp_path):
    proc = run_app(
        "experiment=smoke",
        "debug=fast",
        "dataset.train_frac=0.5",
        f"output_dir={tmp_path}",
        f"dataset.root={tmp_path / 'data'}",
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (job,) = (tmp_path / "runs").iterdir()
    result = json.loads((job / "result.json").read_text())
    assert result["epoch"] == 0 and result["steps"] == 3, result
    assert not (tmp_path / "mlflow.db").exists() and not (job / "checkpoints").exists()
