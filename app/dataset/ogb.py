"""The real `ogbn_products` / `ogbn_mag`, read through `ogb.nodeproppred.NodePropPredDataset`,
and `ogbn_papers100M`, read from OGB's binary layout with numpy (`papers100m`).

Nothing is downloaded here: the files must already sit in OGB's own layout under `cfg.root`
(`app.dataset.files.SPECS`: what unzipping OGB's `products.zip` / `mag.zip` into
`<root>/ogbn_products` / `<root>/ogbn_mag` gives). Every file ogb would otherwise fetch or ask
about is checked first (`check_files`, also run by `python -m app` before torch is imported),
because ogb then prompts on stdin (stale release) or starts a download (missing raw files).

Two more ogb habits are neutralised: `import ogb` starts a PyPI "outdated" check in a
non-daemon thread (a `requests.get` without timeout, which can hang interpreter exit offline),
so it is imported with the `outdated` module blocked; and ogb re-reads its processed file with a
bare `torch.load`, which torch >= 2.6 refuses (see `trusting_ogb_processed_file`).

The converted tensors are cached like the synthetic data (`<root>/<name>-<fingerprint>/data.pt`,
plain tensors, `weights_only=True`), so ogb and its slow CSV parsing run once per data dir.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from app.config import DatasetConfig
from app.dataset.cache import cached
from app.dataset.files import SPECS, OgbSpec, cache_path, check_files

log = logging.getLogger(__name__)

MAG_TYPES = ("paper", "author", "institution", "field_of_study")


def import_ogb_dataset():
    """`NodePropPredDataset`, imported without ogb's background PyPI version check."""
    blocked = "outdated" not in sys.modules
    if blocked:
        sys.modules["outdated"] = None  # makes ogb's `from outdated import ...` fail → no thread
    try:
        from ogb.nodeproppred import NodePropPredDataset
    finally:
        if blocked:
            del sys.modules["outdated"]
    return NodePropPredDataset


@contextmanager
def trusting_ogb_processed_file():
    """Let ogb re-read the `processed/data_processed` pickle it wrote itself from raw/.

    torch >= 2.6 loads with `weights_only=True` by default, and its restricted unpickler cannot
    parse ogb's pickle protocol 4 at all (allow-listing numpy is not enough). The env switch only
    affects `torch.load` calls that do not pass `weights_only`, i.e. ogb's, and only here. Our own
    cache of the converted tensors (see `load_ogb`) is still read with `weights_only=True`.
    """
    key = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
    before = os.environ.get(key)
    os.environ[key] = "1"
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=f".*{key}")
            yield
    finally:
        if before is None:
            del os.environ[key]
        else:
            os.environ[key] = before


def read_ogb(spec: OgbSpec, root: Path) -> tuple[dict, np.ndarray | dict, dict, int]:
    """(graph, labels, split, num_classes) from ogb, after checking every needed file exists."""
    check_files(spec, root)
    (root / spec.dir_name / "processed").mkdir(exist_ok=True)  # ogb saves there, never creates it
    dataset_cls = import_ogb_dataset()
    with trusting_ogb_processed_file():
        dataset = dataset_cls(name=spec.ogb_name, root=str(root))
        split = dataset.get_idx_split()
    graph, labels = dataset[0]
    return graph, labels, split, dataset.num_classes


def tensor(array, dtype) -> torch.Tensor:
    """A tensor over `array` as a writable, C-contiguous `dtype` array (copied only if needed)."""
    return torch.from_numpy(np.require(array, dtype=dtype, requirements=["C", "W"]))


def split_masks(split: dict, num_nodes: int) -> dict[str, torch.Tensor]:
    """OGB's train / valid / test index arrays as bool masks (valid → val_mask)."""
    masks = {}
    for ogb_key, name in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
        masks[name] = torch.zeros(num_nodes, dtype=torch.bool)
        masks[name][tensor(split[ogb_key], np.int64)] = True
    return masks


def products(cfg: DatasetConfig, spec: OgbSpec) -> dict:
    graph, labels, split, num_classes = read_ogb(spec, Path(cfg.root))
    n = int(graph["num_nodes"])
    return {
        "kind": "homo",
        "num_classes": num_classes,
        "x": tensor(graph["node_feat"], cfg.feature_dtype),
        "y": tensor(labels, np.int64).view(-1),
        "edge_index": tensor(graph["edge_index"], np.int64),
        **split_masks(split, n),
    }


def mag(cfg: DatasetConfig, spec: OgbSpec) -> dict:
    from app.dataset.mag import edge_key

    graph, labels, split, num_classes = read_ogb(spec, Path(cfg.root))
    counts = {t: int(graph["num_nodes_dict"][t]) for t in MAG_TYPES}
    paper = {
        "x": tensor(graph["node_feat_dict"]["paper"], cfg.feature_dtype),
        "y": tensor(labels["paper"], np.int64).view(-1),
        **split_masks({k: v["paper"] for k, v in split.items()}, counts["paper"]),
    }
    if cfg.temporal:
        paper["time"] = tensor(graph["node_year"]["paper"], np.int64).view(-1)
    nodes: dict[str, dict] = {t: {"num_nodes": counts[t]} for t in MAG_TYPES}
    nodes["paper"] |= paper
    edges = {edge_key(et): tensor(ei, np.int64) for et, ei in graph["edge_index_dict"].items()}
    return {"kind": "hetero", "num_classes": num_classes, "nodes": nodes, "edges": edges}


def read_split_csv(path: Path) -> np.ndarray:
    """One of OGB's `split/<split>/<name>.csv.gz` files: one node id per line."""
    import pandas as pd

    return pd.read_csv(path, compression="gzip", header=None).to_numpy().reshape(-1)


def papers100m(cfg: DatasetConfig, spec: OgbSpec) -> dict:
    """ogbn-papers100M from `raw/data.npz`, `raw/node-label.npz` and `split/time/*.csv.gz`.

    Read with numpy rather than through ogb, which would pickle a second copy of the whole graph
    under `processed/`. The citations are made undirected as PyG's papers100M examples do
    (`T.ToUndirected`). OGB labels only the ~1.5M arXiv papers (NaN elsewhere): the others get
    class 0 and lie in no mask, so nothing trains or is scored on them and `y` stays in
    [0, num_classes).
    """
    from torch_geometric.utils import to_undirected

    root = Path(cfg.root)
    check_files(spec, root)
    base = root / spec.dir_name
    with np.load(base / "raw" / "data.npz") as graph:
        n = int(np.sum(graph["num_nodes_list"]))
        x = tensor(graph["node_feat"], cfg.feature_dtype)
        edge_index = tensor(graph["edge_index"], np.int64)
    with np.load(base / "raw" / "node-label.npz") as labels:
        label = labels["node_label"].reshape(-1)
    y = np.where(np.isnan(label), 0, label).astype(np.int64)
    split_dir = base / "split" / spec.split
    split = {s: read_split_csv(split_dir / f"{s}.csv.gz") for s in ("train", "valid", "test")}
    return {
        "kind": "homo",
        "num_classes": cfg.num_classes,
        "x": x,
        "y": torch.from_numpy(y),
        "edge_index": to_undirected(edge_index, num_nodes=n),
        **split_masks(split, n),
    }


def load_ogb(cfg: DatasetConfig) -> dict:
    """Plain-tensor dict of a real OGB dataset, in the same layout as the synthetic ones."""
    if cfg.name != "ogbn_mag" and cfg.temporal:
        raise ValueError(
            f"dataset.temporal=true: {cfg.name} has no timestamps here; set "
            f"dataset.temporal=false or use dataset={SPECS[cfg.name].synthetic}"
        )
    spec = SPECS[cfg.name]
    convert = {"ogbn_products": products, "ogbn_papers100M": papers100m, "ogbn_mag": mag}[cfg.name]
    return cached(cache_path(cfg, seed=0), lambda: convert(cfg, spec))
