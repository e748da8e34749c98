"""A user's own graph (`dataset=pyg_file`, `dataset=arrays`): read, checked in one line per
problem, keyed by content, and trained to the same metrics as the source it was written from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from app.config import ConfigError
from app.dataset import load_dataset
from app.dataset.files import DataMissingError, dataset_fingerprint, precheck
from tests.helpers.jobs import run_app

MASKS = ("train_mask", "val_mask", "test_mask")


def smoke_source(compose, tmp_path: Path, *extra: str):
    """The smoke experiment's synthetic graph (the source the user files are written from)."""
    cfg = compose("experiment=smoke", f"dataset.root={tmp_path / 'data'}", *extra)
    return cfg, load_dataset(cfg.dataset, cfg.seed)


def write_arrays(data, folder: Path, masks: bool = True) -> Path:
    """The graph as a folder of arrays: .npy and .pt mixed, as users have them."""
    folder.mkdir()
    np.save(folder / "edge_index.npy", data.edge_index.numpy())
    torch.save(data.x, folder / "features.pt")
    np.save(folder / "labels.npy", data.y.numpy())
    for m in MASKS if masks else ():
        np.save(folder / f"{m}.npy", data[m].numpy())
    return folder


def user(compose, tmp_path: Path, kind: str, path: Path, *extra: str, exp: str = "smoke"):
    cfg = compose(
        f"experiment={exp}", f"dataset={kind}", f"dataset.path={path}",
        f"dataset.root={tmp_path / 'data'}", *extra,
    )  # fmt: skip
    return cfg, load_dataset(cfg.dataset, cfg.seed)


def test_saved_data_and_arrays_load_as_the_source(compose, tmp_path):
    _, source = smoke_source(compose, tmp_path)
    torch.save(source, tmp_path / "graph.pt")
    write_arrays(source, tmp_path / "arrays")
    for kind, path in (("pyg_file", tmp_path / "graph.pt"), ("arrays", tmp_path / "arrays")):
        _, data = user(compose, tmp_path, kind, path)
        for key in ("x", "y", "edge_index", *MASKS):
            assert torch.equal(data[key], source[key]), (kind, key)
        assert data.num_classes == source.num_classes


def test_without_masks_the_split_follows_train_frac_and_seed(compose, tmp_path):
    _, source = smoke_source(compose, tmp_path)
    write_arrays(source, tmp_path / "arrays", masks=False)
    cfg, data = user(compose, tmp_path, "arrays", tmp_path / "arrays", "dataset.train_frac=0.3")
    n = source.num_nodes
    assert int(data.train_mask.sum()) == int(n * 0.3)
    assert int((data.train_mask | data.val_mask | data.test_mask).sum()) == n
    _, again = user(compose, tmp_path, "arrays", tmp_path / "arrays", "dataset.train_frac=0.3")
    assert torch.equal(again.train_mask, data.train_mask)


def test_hetero_data_file_loads(compose, tmp_path):
    cfg = compose("experiment=mag_hetero", "dataset.num_nodes=300", f"dataset.root={tmp_path}")
    source = load_dataset(cfg.dataset, cfg.seed)
    torch.save(source, tmp_path / "mag.pt")
    _, data = user(compose, tmp_path, "pyg_file", tmp_path / "mag.pt", exp="mag_hetero")
    assert data.node_types == source.node_types and data.edge_types == source.edge_types
    assert torch.equal(data["paper"].y, source["paper"].y)
    assert data.num_classes == source.num_classes


def test_partitions_are_keyed_by_content(compose, tmp_path):
    _, source = smoke_source(compose, tmp_path)
    path = tmp_path / "graph.pt"
    torch.save(source, path)
    cfg, _ = user(compose, tmp_path, "pyg_file", path)
    first = dataset_fingerprint(cfg.dataset, cfg.seed)
    shutil.copy(path, tmp_path / "copy.pt")
    copy, _ = user(compose, tmp_path, "pyg_file", tmp_path / "copy.pt")
    assert dataset_fingerprint(copy.dataset, copy.seed) == first  # same bytes, same partition
    source.x[0, 0] += 1.0
    torch.save(source, path)
    assert dataset_fingerprint(cfg.dataset, cfg.seed) != first  # an edited file: partitioned anew


def broken(data, change: str):
    """`data` with one thing a user gets wrong."""
    d = data.clone()
    if change == "float labels":
        d.y = d.y.float()
    elif change == "label range":
        d.y[d.train_mask.nonzero()[0]] = 99
    elif change == "edge ids":
        d.edge_index[1, 5] = d.num_nodes + 7
    elif change == "edge shape":
        d.edge_index = d.edge_index.t().contiguous()
    elif change == "feature rows":
        d.x = d.x[:-3]
    elif change == "nan features":
        d.x[4, 2] = float("nan")
    elif change == "empty val":
        d.test_mask |= d.val_mask
        d.val_mask = torch.zeros_like(d.val_mask)
    elif change == "overlap":
        d.val_mask[d.train_mask.nonzero()[:2, 0]] = True
    elif change == "int mask":
        d.train_mask = d.train_mask.long()
    return d


@pytest.mark.parametrize(
    "change, line",
    [
        ("float labels", "y is torch.float32; expected integer class ids"),
        ("label range", "y of split nodes lies in [0, 99] but num_classes=8: labels must be 0..7"),
        ("edge ids", "edge_index has destination ids in [0, 2007] but 2000 nodes (0..1999)"),
        ("edge shape", "edge_index is [20000, 2] torch.int64; expected an integer tensor [2,"),
        ("feature rows", "disagree on the node count (x 1997, y 2000, train_mask 2000, "),
        ("nan features", "x has 1 non-finite values (NaN or inf)"),
        ("empty val", "val_mask selects no node"),
        ("overlap", "train_mask and val_mask share 2 nodes; the splits must be disjoint"),
        ("int mask", "train_mask is [2000] torch.int64; expected a bool tensor [2000]"),
    ],
)
def test_each_problem_is_one_line_naming_the_file(compose, tmp_path, change, line):
    _, source = smoke_source(compose, tmp_path)
    path = tmp_path / "graph.pt"
    data = broken(source, change)
    torch.save(data, path)
    with pytest.raises(ConfigError) as err:
        user(compose, tmp_path, "pyg_file", path)
    lines = str(err.value).splitlines()
    assert all(ln.startswith(f"dataset.path={path}: ") for ln in lines), lines
    assert any(line in ln for ln in lines), lines


def test_several_problems_give_one_line_each(compose, tmp_path):
    _, source = smoke_source(compose, tmp_path)
    data = broken(broken(source, "nan features"), "overlap")
    data.test_mask = data.test_mask.long()
    folder = write_arrays(data, tmp_path / "arrays")
    with pytest.raises(ConfigError) as err:
        user(compose, tmp_path, "arrays", folder)
    assert len(str(err.value).splitlines()) == 2, str(err.value)


@pytest.mark.parametrize(
    "setup, message",
    [
        ("nothing", "no such file; write your graph with torch.save(data, PATH)"),
        ("not data", "holds a dict; expected torch.save(Data or HeteroData)"),
        ("pickle", "not readable as a saved PyG Data/HeteroData"),
    ],
)
def test_unusable_file_is_one_line(compose, tmp_path, setup, message):
    path = tmp_path / "graph.pt"
    if setup == "not data":
        torch.save({"x": torch.zeros(2)}, path)
    if setup == "pickle":  # an arbitrary object: never unpickled (weights_only)
        torch.save(Path("/"), path)
    error = DataMissingError if setup == "nothing" else ConfigError
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        user(compose, tmp_path, "pyg_file", path)


def test_missing_path_and_files_fail_before_loading(compose, tmp_path):
    with pytest.raises(ConfigError, match="dataset.path=None: dataset=pyg_file reads your graph"):
        compose("experiment=smoke", "dataset=pyg_file")
    (tmp_path / "arrays").mkdir()
    np.save(tmp_path / "arrays" / "features.npy", np.zeros((3, 2), np.float32))
    cfg = compose("experiment=smoke", "dataset=arrays", f"dataset.path={tmp_path / 'arrays'}")
    with pytest.raises(DataMissingError, match=r"no edge_index.npy or edge_index.pt, labels.npy"):
        precheck(cfg.dataset)


def _train(tmp_path: Path, name: str, *overrides: str, exp: str = "smoke") -> dict:
    out = tmp_path / name
    proc = run_app(
        f"experiment={exp}", f"output_dir={out}", f"dataset.root={tmp_path / 'data'}",
        "mlflow.enabled=false", "train.checkpoint=false", *overrides, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (job,) = (out / "runs").iterdir()
    return json.loads((job / "result.json").read_text())


METRICS = ("loss", "train_acc", "val_acc", "test_acc")


@pytest.mark.dist
@pytest.mark.long
def test_user_files_train_to_the_source_metrics(compose, tmp_path):
    """One process: a saved Data and a folder of arrays train exactly as their source."""
    _, source = smoke_source(compose, tmp_path)
    torch.save(source, tmp_path / "graph.pt")
    write_arrays(source, tmp_path / "arrays")
    want = _train(tmp_path, "synthetic")
    for kind, path in (("pyg_file", tmp_path / "graph.pt"), ("arrays", tmp_path / "arrays")):
        got = _train(tmp_path, kind, f"dataset={kind}", f"dataset.path={path}")
        assert {k: got[k] for k in METRICS} == {k: want[k] for k in METRICS}, kind


@pytest.mark.dist
@pytest.mark.long
def test_saved_data_trains_on_two_nodes_like_its_source(compose, tmp_path):
    _, source = smoke_source(compose, tmp_path)
    torch.save(source, tmp_path / "graph.pt")
    two = ("cluster.num_nodes=2",)
    want = _train(tmp_path, "synthetic", *two)
    got = _train(tmp_path, "file", *two, "dataset=pyg_file", f"dataset.path={tmp_path}/graph.pt")
    assert {k: got[k] for k in METRICS} == {k: want[k] for k in METRICS}
    assert got["world_size"] == 2
    (root,) = (tmp_path / "file" / "partitions").iterdir()
    assert root.name.startswith("pyg_file-") and (root / "part_1" / "graph.pt").exists()


@pytest.mark.dist
@pytest.mark.long
def test_saved_hetero_data_trains_to_the_source_metrics(compose, tmp_path):
    mag = ("dataset.num_nodes=1000", "cluster.num_nodes=1", "train.epochs=2")
    cfg = compose("experiment=mag_hetero", *mag, f"dataset.root={tmp_path / 'data'}")
    torch.save(load_dataset(cfg.dataset, cfg.seed), tmp_path / "mag.pt")
    want = _train(tmp_path, "synthetic", *mag, exp="mag_hetero")
    path = f"dataset.path={tmp_path}/mag.pt"
    got = _train(tmp_path, "file", *mag, "dataset=pyg_file", path, exp="mag_hetero")
    assert {k: got[k] for k in METRICS} == {k: want[k] for k in METRICS}
    # the featureless types' learnable rows trained the same way too
    moved = [k for k in want if k.startswith("emb_change.")]
    assert moved and {k: got[k] for k in moved} == {k: want[k] for k in moved}
