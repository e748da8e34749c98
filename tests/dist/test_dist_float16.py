"""`dataset.feature_dtype=float16` through a whole 2-node job: float16 parts, float16 rows on
the wire, float32 maths, and the same accuracy as float32 features (within 0.5 point); and a
float32 store whose rows travel as float16 only by the explicit `sampler.feature_wire_dtype`
opt-in, with the same accuracy."""

from __future__ import annotations

import json

import pytest
import torch

from app.partition.reader import META_FILE, torch_load
from tests.helpers.jobs import run_app

pytestmark = [pytest.mark.dist, pytest.mark.long]  # three 2-node jobs


def test_float16_features_train_like_float32(tmp_path):
    found = {}
    runs = {"float32": ("float32", "store"), "float16": ("float16", "store"),
            "wire16": ("float32", "float16")}  # fmt: skip
    for name, (dtype, wire) in runs.items():
        job = tmp_path / name
        proc = run_app(
            "+experiment=smoke", "cluster.num_nodes=2", "dataset.num_nodes=4000",
            "dataset.num_features=32", "dataset.train_frac=0.3", "train.epochs=4",
            f"dataset.feature_dtype={dtype}", f"sampler.feature_wire_dtype={wire}",
            f"output_dir={tmp_path}", f"dataset.root={tmp_path / 'data'}",
            f"partition.root={tmp_path / ('P' + dtype)}",
            f"mlflow.tracking_uri=sqlite:///{tmp_path}/mlflow.db", f"hydra.run.dir={job}",
            timeout=180,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        found[name] = json.loads((job / "result.json").read_text())
        part = tmp_path / f"P{dtype}"
        assert (part / META_FILE).is_file()
        x = torch_load(part / "part_0" / "node_feats.pt")["feats"]["x"]
        assert x.dtype == getattr(torch, dtype)  # stored narrow on disk, in the parts
    wide, narrow = found["float32"], found["float16"]
    assert wide["test_acc"] > 0.4, wide  # it learned (8 classes: chance ~12 %)
    assert abs(narrow["test_acc"] - wide["test_acc"]) <= 0.005, (wide, narrow)
    assert abs(narrow["val_acc"] - wide["val_acc"]) <= 0.005, (wide, narrow)
    # halo rows cross the wire at 2 bytes per value instead of 4
    assert narrow["remote_feature_bytes_per_batch"] < 0.6 * wide["remote_feature_bytes_per_batch"]
    # the opt-in: float32 parts, float16 in transit, the same accuracy and bytes as a float16 store
    opted = found["wire16"]
    assert abs(opted["test_acc"] - wide["test_acc"]) <= 0.005, (wide, opted)
    assert opted["remote_feature_bytes_per_batch"] < 0.6 * wide["remote_feature_bytes_per_batch"]
