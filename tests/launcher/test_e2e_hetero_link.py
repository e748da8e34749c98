"""Heterogeneous node classification and link prediction as real 2-node jobs on 127.0.0.1.

`python -m app +experiment=mag_hetero` / `+experiment=products_link` with tiny graphs: real
trainers, samplers, RPC, gloo, METIS and an MLflow sqlite store; every wait is bounded by a
subprocess timeout.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from tests.conftest import run_app

pytestmark = pytest.mark.dist

JOB_TIMEOUT_S = 150


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """Output dir shared by the module's jobs: datasets and partitions are made once."""
    return tmp_path_factory.mktemp("e2e_hl")


def _common(shared: Path, tmp: Path) -> list[str]:
    return [
        f"output_dir={shared}",
        f"dataset.root={shared}/data",
        f"mlflow.tracking_uri=sqlite:///{tmp}/mlflow.db",
        f"hydra.run.dir={tmp}/run",
        "dataset.num_nodes=2000",
    ]


def _ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )


def _finished_run(tmp: Path) -> dict[str, float]:
    """The job's MLflow run (checked FINISHED) as its latest metrics."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp}/mlflow.db")
    run = client.get_run((tmp / "run" / "mlflow_run_id").read_text().strip())
    assert run.info.status == "FINISHED"
    return run.data.metrics


def test_mag_hetero_two_nodes(shared, tmp_path):
    classes = 8
    proc = run_app(
        "+experiment=mag_hetero",
        *_common(shared, tmp_path),
        f"dataset.num_classes={classes}",
        "train.epochs=3",
        timeout=JOB_TIMEOUT_S,
    )
    _ok(proc)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["world_size"] == 2
    assert result["val_acc"] > 1.5 / classes and result["test_acc"] > 1.5 / classes, result
    metrics = _finished_run(tmp_path)
    assert "test_acc" in metrics
    for ntype in ("author", "institution", "field_of_study"):  # featureless: DistEmbedding rows
        assert metrics[f"emb_change.{ntype}"] > 1e-4, metrics
    logs = {p.name for p in (tmp_path / "run" / "logs").glob("*.log")}
    assert {"trainer0-0.log", "trainer1-0.log"} <= logs


def test_products_link_two_nodes(shared, tmp_path):
    proc = run_app(
        "+experiment=products_link",
        *_common(shared, tmp_path),
        "train.epochs=2",
        timeout=JOB_TIMEOUT_S,
    )
    _ok(proc)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["val_auc"] > 0.65 and result["test_auc"] > 0.65, result
    metrics = _finished_run(tmp_path)
    assert metrics["test_auc"] > 0.65
    assert metrics["val_mrr"] > 0.2 and metrics["test_mrr"] > 0.2  # random: ~0.18 of 20 negs
    _check_held_out_edges_not_partitioned(shared)


def _check_held_out_edges_not_partitioned(shared: Path) -> None:
    """No val / test edge of link_split.pt is in any part's message-passing graph."""
    from app.partition.link import LINK_SPLIT_FILE
    from app.partition.reader import load_partition, read_meta

    (root,) = (shared / "partitions").glob("synthetic_products-*-link")
    meta = read_meta(root)
    n = int(meta["num_nodes"])
    held = torch.load(root / LINK_SPLIT_FILE)
    held_keys = torch.cat(
        [held["val"][0] * n + held["val"][1], held["test"][0] * n + held["test"][1]]
    )
    assert held_keys.numel() > 0
    for p in range(meta["num_parts"]):
        g = load_partition(root, p, meta["num_parts"]).graph
        keys = g["row"] * n + g["col"]
        assert not torch.isin(held_keys, keys).any()


def test_link_on_hetero_dataset_fails_early(shared, tmp_path):
    proc = run_app(
        "+experiment=products_link",
        *_common(shared, tmp_path),
        "dataset=synthetic_mag",
        timeout=60,
    )
    assert proc.returncode != 0
    assert "distributed link loader samples homogeneous graphs only" in proc.stderr + proc.stdout
    assert not (tmp_path / "run" / "logs").exists()  # rejected before any child started
