"""The same config at 1 and at 2 nodes: same metric keys and meanings, same checkpoint format.

Node classification (homogeneous: test accuracy within 1.5 points; heterogeneous) and link
prediction (homogeneous and heterogeneous) run once in this process (`train_single`) and once as
a real 2-node job (`run_job`: trainers, samplers, RPC, gloo). The heterogeneous node job is then
resumed (sparse state and `DistEmbedding` rows restored), and the link jobs must learn. Each
2-node job costs ~20 s of start-up on 2 cores, so one job serves every check of its objective.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from app.train.checkpoint import checkpoint_path, read_checkpoint

pytestmark = pytest.mark.dist

JOB_ONLY = {"epochs_done", "world_size"}  # the launcher's result.json adds these
JOB_ONLY |= {"peak_pss_gib", "peak_pss_gib/host0", "peak_pss_gib/host1"}  # ... and its memory
# remote traffic of distributed loaders (app/train/loop.py `_data_path`); local loaders log none
DATA_PATH = {"remote_feature_bytes_per_batch", "hop_bytes_per_batch"}
DATA_PATH |= {"cache_hit_rate", "hot_cache_hit_rate"}


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("parity")


def _common(shared: Path, *overrides: str) -> list[str]:
    return [
        *overrides,
        f"output_dir={shared}",
        f"dataset.root={shared}/data",
        "mlflow.enabled=false",
    ]


def _both(compose, shared: Path, tmp: Path, *overrides: str) -> tuple[dict, dict]:
    from app.launch import run_job
    from app.train.single import train_single

    common = _common(shared, *overrides)
    single = train_single(compose(*common, "cluster.num_nodes=1"), job_dir=tmp / "single")
    dist = run_job(compose(*common, "cluster.num_nodes=2"), tmp / "dist")
    logs = {p.name for p in (tmp / "dist" / "logs").glob("*.log")}
    assert {"trainer0-0.log", "trainer1-0.log"} <= logs
    return single, dist


def _shape(state: Any) -> Any:
    """A checkpoint's structure: nested keys, tensor shapes (dense Adam state excluded)."""
    if isinstance(state, dict):
        return {k: _shape(v) for k, v in state.items() if k not in ("rng", "metrics")}
    if hasattr(state, "shape"):
        return tuple(state.shape)
    return type(state).__name__


def _same_format(tmp: Path) -> None:
    one, two = (read_checkpoint(checkpoint_path(tmp / d)) for d in ("single", "dist"))
    assert set(one) == set(two)
    assert _shape(one["model"]) == _shape(two["model"])
    assert _shape(one["embeddings"]) == _shape(two["embeddings"])
    assert set(one["optimizer"]) == set(two["optimizer"]) == {"dense", "sparse"}
    assert _shape(one["optimizer"]["sparse"]) == _shape(two["optimizer"]["sparse"])


def _same_keys(single: dict, dist: dict) -> None:
    assert set(single) == set(dist) - JOB_ONLY - DATA_PATH


def test_homo_node_parity(shared, tmp_path, compose):
    """Same data and hyper-parameters: 2 nodes within 1.5 accuracy points of 1 process (the
    2-node job on a relabelled partition in locality order, as `products_homo` runs)."""
    single, dist = _both(
        compose, shared, tmp_path,
        "+experiment=smoke", "dataset.num_nodes=6000", "dataset.train_frac=0.3",
        "train.epochs=20", "train.lr=0.01", "loader.batch_size=128",
        "partition.relabel=true", "partition.order=locality",
    )  # fmt: skip
    assert single["test_acc"] > 0.8  # converged, so the comparison means something
    assert abs(single["test_acc"] - dist["test_acc"]) <= 0.015, (single, dist)
    _same_keys(single, dist)
    _same_format(tmp_path)


HETERO = ("+experiment=mag_hetero", "dataset.num_nodes=2000", "dataset.num_classes=8")


def test_hetero_node_parity_and_resume(shared, tmp_path, compose):
    """Both runs learn (featureless types through trained embedding rows); the 2-node job,
    resumed for one more epoch, continues from its checkpoint (see `_check_resumed`)."""
    from app.launch import run_job

    single, dist = _both(compose, shared, tmp_path, *HETERO, "train.epochs=3")
    _same_keys(single, dist)
    for result in (single, dist):
        assert result["val_acc"] > 1.5 / 8 and result["test_acc"] > 1.5 / 8, result
        for ntype in ("author", "institution", "field_of_study"):
            assert result[f"emb_change.{ntype}"] > 1e-4, (ntype, result)
    _same_format(tmp_path)

    path = checkpoint_path(tmp_path / "dist")
    saved = read_checkpoint(path)
    more = ("train.epochs=4", "train.resume=true", "train.max_steps_per_epoch=1")
    cfg = compose(*_common(shared, *HETERO, *more, "loader.batch_size=4"), "cluster.num_nodes=2")
    run_job(cfg, tmp_path / "dist")
    assert "resumed from" in (tmp_path / "dist" / "logs" / "trainer0-0.log").read_text()
    _check_resumed(saved, read_checkpoint(path))


def _check_resumed(saved: dict, after: dict) -> None:
    """The resumed epoch took ONE small batch per trainer, so most rows stayed untouched: they
    must equal the saved rows bit for bit (fresh tables would match none), and so must their
    SparseAdam moments; the step count continues from the saved one."""
    assert after["epoch"] == saved["epoch"] + 1
    assert set(saved["embeddings"]) == {"author", "institution", "field_of_study"}
    sparse, new_sparse = saved["optimizer"]["sparse"], after["optimizer"]["sparse"]
    assert set(sparse["state"]["author"]) == {"exp_avg", "exp_avg_sq"}
    assert new_sparse["step"]["author"] == sparse["step"]["author"] + 1
    for ntype, rows in saved["embeddings"].items():
        same = (after["embeddings"][ntype] == rows).all(dim=1)
        share = float(same.float().mean())
        assert 0.0 < share < 1.0 and (share > 0.5 or len(rows) < 100), (ntype, share)
        for key, value in sparse["state"][ntype].items():
            assert torch.equal(new_sparse["state"][ntype][key][same], value[same]), (ntype, key)


def test_homo_link_parity(shared, tmp_path, compose):
    """Both runs learn (AUC, MRR against 20 negatives: random is ~0.18), and no held-out edge
    is in any part's message-passing graph. The 2-node job runs on a relabelled partition in
    locality order: its held-out edges are stored in the partition's new ids."""
    single, dist = _both(
        compose, shared, tmp_path,
        "+experiment=products_link", "dataset.num_nodes=2000", "train.epochs=2",
        "partition.relabel=true", "partition.order=locality",
    )  # fmt: skip
    _same_keys(single, dist)
    for result in (single, dist):
        assert result["val_auc"] > 0.65 and result["test_auc"] > 0.65, result
        assert result["val_mrr"] > 0.2 and result["test_mrr"] > 0.2, result
    _same_format(tmp_path)
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
        assert not torch.isin(held_keys, g["row"] * n + g["col"]).any()


def test_hetero_link_parity(shared, tmp_path, compose):
    single, dist = _both(
        compose, shared, tmp_path,
        "+experiment=mag_link", "dataset.num_nodes=1500", "train.epochs=1",
    )  # fmt: skip
    _same_keys(single, dist)
    for key in ("val_auc", "test_auc", "val_mrr", "test_mrr"):
        assert 0.0 <= single[key] <= 1.0 and 0.0 <= dist[key] <= 1.0, key
    _same_format(tmp_path)
