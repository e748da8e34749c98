"""The real `ogbn_products` / `ogbn_mag`, read through `ogb.nodeproppred.NodePropPredDataset`.

Nothing is downloaded here: the files must already sit in OGB's own layout under `cfg.root`,
i.e. what unzipping OGB's `products.zip` / `mag.zip` into `<root>/ogbn_products` /
`<root>/ogbn_mag` gives (`RELEASE_v<version>.txt`, `raw/*.csv.gz`, `split/<split>/...`). Every
file ogb would otherwise fetch or ask about is checked first, because ogb then prompts on stdin
(stale release) or starts a download (missing raw files).

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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from app.config import DatasetConfig
from app.dataset.cache import cache_path, cached

log = logging.getLogger(__name__)

MAG_TYPES = ("paper", "author", "institution", "field_of_study")


class OgbDataMissingError(FileNotFoundError):
    """An OGB file is missing under `dataset.root`; it cannot be downloaded here."""


@dataclass(frozen=True)
class OgbSpec:
    ogb_name: str  # ogb's name, e.g. ogbn-products
    version: int  # ogb master.csv `version` → RELEASE_v<version>.txt
    split: str  # ogb master.csv `split` → split/<split>/
    raw_files: tuple[str, ...]  # needed when ogb has no processed file yet
    split_files: tuple[str, ...]
    synthetic: str  # the stand-in to suggest

    @property
    def dir_name(self) -> str:
        return self.ogb_name.replace("-", "_")


_MAG_RELATIONS = tuple(
    f"raw/relations/{rel}/{f}"
    for rel in (
        "author___affiliated_with___institution",
        "author___writes___paper",
        "paper___cites___paper",
        "paper___has_topic___field_of_study",
    )
    for f in ("edge.csv.gz", "num-edge-list.csv.gz")
)

SPECS = {
    "ogbn_products": OgbSpec(
        "ogbn-products",
        1,
        "sales_ranking",
        tuple(
            f"raw/{f}.csv.gz"
            for f in ("edge", "num-node-list", "num-edge-list", "node-feat", "node-label")
        ),
        tuple(f"split/sales_ranking/{s}.csv.gz" for s in ("train", "valid", "test")),
        "synthetic_products",
    ),
    "ogbn_mag": OgbSpec(
        "ogbn-mag",
        2,
        "time",
        (
            "raw/num-node-dict.csv.gz",
            "raw/triplet-type-list.csv.gz",
            "raw/nodetype-has-label.csv.gz",
            "raw/node-label/paper/node-label.csv.gz",
            "raw/node-feat/paper/node-feat.csv.gz",
            "raw/node-feat/paper/node_year.csv.gz",
            *_MAG_RELATIONS,
        ),
        ("split/time/nodetype-has-split.csv.gz",)
        + tuple(f"split/time/paper/{s}.csv.gz" for s in ("train", "valid", "test")),
        "synthetic_mag",
    ),
}


def check_files(spec: OgbSpec, root: Path) -> None:
    """Raise OgbDataMissingError naming the first file ogb would need but cannot find."""
    base = root / spec.dir_name
    needed = [f"RELEASE_v{spec.version}.txt", *spec.split_files]
    if not (base / "processed" / "data_processed").exists():
        needed += spec.raw_files
    for rel in needed:
        if not (base / rel).exists():
            raise OgbDataMissingError(
                f"{base / rel} not found: {spec.ogb_name} cannot be downloaded here. Unzip OGB's "
                f"{spec.ogb_name} files into {base}/ (OGB layout), or use "
                f"dataset={spec.synthetic}"
            )


def precheck(cfg: DatasetConfig) -> None:
    """Before any work: OgbDataMissingError if `cfg` is an OGB dataset whose files are missing.

    Nothing to check for synthetic datasets, or once the converted tensors are cached (a job
    that reuses its partition may then run without the raw files).
    """
    spec = SPECS.get(cfg.name)
    if spec is None or cache_path(cfg, seed=0).exists():
        return
    check_files(spec, Path(cfg.root))


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
        "x": tensor(graph["node_feat"], np.float32),
        "y": tensor(labels, np.int64).view(-1),
        "edge_index": tensor(graph["edge_index"], np.int64),
        **split_masks(split, n),
    }


def mag(cfg: DatasetConfig, spec: OgbSpec) -> dict:
    from app.dataset.mag import edge_key

    graph, labels, split, num_classes = read_ogb(spec, Path(cfg.root))
    counts = {t: int(graph["num_nodes_dict"][t]) for t in MAG_TYPES}
    paper = {
        "x": tensor(graph["node_feat_dict"]["paper"], np.float32),
        "y": tensor(labels["paper"], np.int64).view(-1),
        **split_masks({k: v["paper"] for k, v in split.items()}, counts["paper"]),
    }
    if cfg.temporal:
        paper["time"] = tensor(graph["node_year"]["paper"], np.int64).view(-1)
    nodes: dict[str, dict] = {t: {"num_nodes": counts[t]} for t in MAG_TYPES}
    nodes["paper"] |= paper
    edges = {edge_key(et): tensor(ei, np.int64) for et, ei in graph["edge_index_dict"].items()}
    return {"kind": "hetero", "num_classes": num_classes, "nodes": nodes, "edges": edges}


def load_ogb(cfg: DatasetConfig) -> dict:
    """Plain-tensor dict of a real OGB dataset, in the same layout as the synthetic ones."""
    if cfg.name == "ogbn_products" and cfg.temporal:
        raise ValueError(
            "dataset.temporal=true: ogbn_products has no timestamps; set dataset.temporal=false "
            "or use dataset=synthetic_products"
        )
    spec = SPECS[cfg.name]
    convert = products if cfg.name == "ogbn_products" else mag
    return cached(cache_path(cfg, seed=0), lambda: convert(cfg, spec))
