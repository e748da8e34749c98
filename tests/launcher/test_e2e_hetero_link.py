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


def _rows_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a == b).all(dim=1)


def test_mag_hetero_resume_restores_embedding_rows_and_sparse_state(shared, tmp_path):
    """2 nodes, 1 epoch with a checkpoint; the resumed run starts from the saved rows.

    The resumed epoch takes ONE small batch per trainer, so most rows stay untouched: in the
    new checkpoint they must equal the saved rows bit for bit (fresh tables would match
    none), and so must their SparseAdam moments; the step count continues from the saved one.
    """
    from app.train.checkpoint import checkpoint_path, read_checkpoint

    job = [*_common(shared, tmp_path), "+experiment=mag_hetero", "train.epochs=1"]
    _ok(run_app(*job, timeout=JOB_TIMEOUT_S))
    path = checkpoint_path(tmp_path / "run")
    saved = read_checkpoint(path)
    assert saved["epoch"] == 0 and set(saved["embeddings"]) == {
        "author", "institution", "field_of_study",
    }  # fmt: skip
    sparse = saved["optimizer"]["sparse"]
    assert set(sparse["state"]["author"]) == {"exp_avg", "exp_avg_sq"}
    assert sparse["state"]["author"]["exp_avg"].shape == saved["embeddings"]["author"].shape

    resumed = [
        *job[:-1], "train.epochs=2", "train.resume=true",
        "train.max_steps_per_epoch=1", "loader.batch_size=4",
    ]  # fmt: skip
    _ok(run_app(*resumed, timeout=JOB_TIMEOUT_S))
    log0 = (tmp_path / "run" / "logs" / "trainer0-0.log").read_text()
    assert "resumed from" in log0
    after = read_checkpoint(path)
    assert after["epoch"] == 1
    new_sparse = after["optimizer"]["sparse"]
    assert new_sparse["step"]["author"] == sparse["step"]["author"] + 1
    for ntype, rows in saved["embeddings"].items():
        same = _rows_equal(after["embeddings"][ntype], rows)
        share = float(same.float().mean())  # fresh tables would match no row
        assert 0.0 < share < 1.0 and (share > 0.5 or len(rows) < 100), (ntype, share)
        for key, value in sparse["state"][ntype].items():
            kept = new_sparse["state"][ntype][key][same]
            assert torch.equal(kept, value[same]), (ntype, key)
