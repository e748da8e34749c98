"""Where a dataset's files live, known without importing torch or PyG.

`python -m app` checks a real OGB dataset's files right after composing the config, before the
seconds of `import torch_geometric`, so a missing dataset is named at once (`precheck`).

* `cache_path`: `<root>/<name>-<fingerprint>/data.pt`, the generated or converted tensors
  (written and read by `app.dataset.cache`), keyed by `dataset_fingerprint`;
* `SPECS`: the files `ogb.nodeproppred.NodePropPredDataset` reads for ogbn-products,
  ogbn-papers100M and ogbn-mag, i.e. what unzipping OGB's `products.zip` / `papers100M-bin.zip`
  / `mag.zip` gives, moved to `<root>/ogbn_products` / `<root>/ogbn_papers100M` /
  `<root>/ogbn_mag`; `check_files` names what is missing and how to get it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from app.config import DatasetConfig

GENERATOR_VERSION = 1  # bump when the synthetic generators' output changes (app/dataset/)
# Keys that change synthetic data; real OGB data depends only on the name (and `temporal`).
SYNTHETIC_KEYS = ("num_nodes", "avg_degree", "num_features", "num_classes", "num_communities")
SPLIT_KEYS = ("train_frac", "val_frac")
OPTIONAL_KEYS = {"test_frac": 0.0, "feature_dtype": "float32"}
SHOWN_MISSING = 3  # missing files named in the error; the rest are counted


def dataset_fingerprint(cfg: DatasetConfig, seed: int) -> str:
    """Short stable hash of everything that determines the data (partitions are keyed by it)."""
    fields = asdict(cfg)
    key: dict[str, object] = {"name": cfg.name, "temporal": cfg.temporal}
    if cfg.feature_dtype != "float32":  # real data too: its features are stored narrowed
        key["feature_dtype"] = cfg.feature_dtype
    if cfg.name.startswith("synthetic"):
        key |= {k: fields[k] for k in SYNTHETIC_KEYS + SPLIT_KEYS}
        key |= {"seed": seed, "version": GENERATOR_VERSION}
        # keys added later join only when set, so existing datasets keep their fingerprint
        key |= {k: fields[k] for k, default in OPTIONAL_KEYS.items() if fields[k] != default}
    blob = json.dumps(key, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def cache_path(cfg: DatasetConfig, seed: int) -> Path:
    return Path(cfg.root) / f"{cfg.name}-{dataset_fingerprint(cfg, seed)}" / "data.pt"


class OgbDataMissingError(FileNotFoundError):
    """An OGB file is missing under `dataset.root`; it is never downloaded at run time."""


@dataclass(frozen=True)
class OgbSpec:
    ogb_name: str  # ogb's name, e.g. ogbn-products
    version: int  # ogb master.csv `version` → RELEASE_v<version>.txt
    split: str  # ogb master.csv `split` → split/<split>/
    url: str  # ogb master.csv `url`: the zip a user downloads
    raw_files: tuple[str, ...]  # needed when ogb has no processed file yet
    split_files: tuple[str, ...]
    synthetic: str  # the stand-in to suggest
    binary: bool = False  # raw/*.npz read by us directly: the raw files are always needed

    @property
    def dir_name(self) -> str:
        return self.ogb_name.replace("-", "_")

    @property
    def zip_dir(self) -> str:
        """The folder the zip unpacks to (ogb renames it to `dir_name` after its download)."""
        return self.url.rsplit("/", 1)[1].removesuffix(".zip")


_OGB_URL = "http://snap.stanford.edu/ogb/data/nodeproppred"
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
        f"{_OGB_URL}/products.zip",
        tuple(
            f"raw/{f}.csv.gz"
            for f in ("edge", "num-node-list", "num-edge-list", "node-feat", "node-label")
        ),
        tuple(f"split/sales_ranking/{s}.csv.gz" for s in ("train", "valid", "test")),
        "synthetic_products",
    ),
    "ogbn_papers100M": OgbSpec(
        "ogbn-papers100M",
        1,
        "time",
        f"{_OGB_URL}/papers100M-bin.zip",
        ("raw/data.npz", "raw/node-label.npz"),
        tuple(f"split/time/{s}.csv.gz" for s in ("train", "valid", "test")),
        "synthetic_papers",
        binary=True,
    ),
    "ogbn_mag": OgbSpec(
        "ogbn-mag",
        2,
        "time",
        f"{_OGB_URL}/mag.zip",
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
    """OgbDataMissingError naming the files ogb would need but cannot find, and the fix."""
    base = root / spec.dir_name
    needed = [f"RELEASE_v{spec.version}.txt", *spec.split_files]
    if spec.binary or not (base / "processed" / "data_processed").exists():
        needed += spec.raw_files
    missing = [rel for rel in needed if not (base / rel).exists()]
    if not missing:
        return
    shown = ", ".join(missing[:SHOWN_MISSING])
    more = f" and {len(missing) - SHOWN_MISSING} more" if len(missing) > SHOWN_MISSING else ""
    if base.is_dir():
        what = f"{base}: {len(missing)} of the {len(needed)} files {spec.ogb_name} needs are "
        what += f"missing: {shown}{more}"
    else:
        what = f"{base} does not exist ({spec.ogb_name} needs {len(needed)} files there: "
        what += f"{shown}{more})"
    raise OgbDataMissingError(
        f"{what}; nothing is downloaded at run time. Download {spec.url}, unzip it in {root} "
        f"and rename {spec.zip_dir}/ to {spec.dir_name}/ (or point dataset.root at the folder "
        f"holding {spec.dir_name}/), or use dataset={spec.synthetic}"
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
