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
def test_partition_task_writes_then_reuses_without_opening_the_store(tmp_path):
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
    assert "edge cut" in first.stdout and "edge cut" in second.stdout  # the stats, printed
    stats = json.loads((root / "META.json").read_text())["stats"]  # and kept with the parts
    assert 0 < stats["edge_cut_frac"] < 0.5, stats
    assert not (tmp_path / "mlflow.db").exists()  # nothing to track: the store is not opened


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
        "system/epoch_time_s",
        "system/seeds_per_s",
        "system/sampled_edges_per_s",
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


@pytest.mark.dist
def test_busy_port_is_one_line_before_partitioning_and_leaves_no_run_dir(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = tmp_path / "run"
        proc = run_app(
            "+experiment=smoke", "cluster.num_nodes=2", f"cluster.master_port={port}",
            f"output_dir={tmp_path}", f"dataset.root={tmp_path / 'data'}", f"hydra.run.dir={run}",
            timeout=180,
        )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"config error: port {port} (ddp) on 127.0.0.1 is busy" in proc.stderr
    assert not run.exists() and not (tmp_path / "data").exists()
    assert not (tmp_path / "partitions").exists()
