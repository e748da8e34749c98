"""The same config at 1 and at 2 nodes: same metric keys and meanings, same checkpoint format.

Node classification (homogeneous: test accuracy within 1.5 points; heterogeneous) and link
prediction (homogeneous and heterogeneous) run once in this process (`train_single`) and once as
a real 2-node job (`run_job`: trainers, samplers, RPC, gloo).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.train.checkpoint import checkpoint_path, read_checkpoint

pytestmark = pytest.mark.dist

JOB_ONLY = {"epochs_done", "world_size"}  # the launcher's result.json adds these
# remote traffic of distributed loaders (app/train/loop.py `_data_path`); local loaders log none
DATA_PATH = {"remote_feature_bytes_per_batch", "hop_bytes_per_batch", "cache_hit_rate"}


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("parity")


def _both(compose, shared: Path, tmp: Path, *overrides: str) -> tuple[dict, dict]:
    from app.launch import run_job
    from app.train.single import train_single

    common = [
        *overrides,
        f"output_dir={shared}",
        f"dataset.root={shared}/data",
        "mlflow.enabled=false",
    ]
    single = train_single(compose(*common, "cluster.num_nodes=1"), job_dir=tmp / "single")
    dist = run_job(compose(*common, "cluster.num_nodes=2"), tmp / "dist")
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
    """Same data and hyper-parameters: 2 nodes within 1.5 accuracy points of 1 process."""
    single, dist = _both(
        compose, shared, tmp_path,
        "+experiment=smoke", "dataset.num_nodes=6000", "dataset.train_frac=0.3",
        "train.epochs=20", "train.lr=0.01", "loader.batch_size=128",
    )  # fmt: skip
    assert single["test_acc"] > 0.8  # converged, so the comparison means something
    assert abs(single["test_acc"] - dist["test_acc"]) <= 0.015, (single, dist)
    _same_keys(single, dist)
    _same_format(tmp_path)


def test_hetero_node_parity(shared, tmp_path, compose):
    single, dist = _both(
        compose, shared, tmp_path,
        "+experiment=mag_hetero", "dataset.num_nodes=1500", "train.epochs=1",
    )  # fmt: skip
    _same_keys(single, dist)
    assert {"emb_change.author", "val_acc", "test_acc"} <= set(single)
    _same_format(tmp_path)


def test_homo_link_parity(shared, tmp_path, compose):
    single, dist = _both(
        compose, shared, tmp_path,
        "+experiment=products_link", "dataset.num_nodes=1500", "train.epochs=1",
    )  # fmt: skip
    _same_keys(single, dist)
    for key in ("val_auc", "test_auc", "val_mrr", "test_mrr"):
        assert 0.0 <= single[key] <= 1.0 and 0.0 <= dist[key] <= 1.0, key
    _same_format(tmp_path)


def test_hetero_link_parity(shared, tmp_path, compose):
    single, dist = _both(
        compose, shared, tmp_path,
        "+experiment=mag_link", "dataset.num_nodes=1500", "train.epochs=1",
    )  # fmt: skip
    _same_keys(single, dist)
    for key in ("val_auc", "test_auc", "val_mrr", "test_mrr"):
        assert 0.0 <= single[key] <= 1.0 and 0.0 <= dist[key] <= 1.0, key
    _same_format(tmp_path)
