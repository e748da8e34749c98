"""Where a dataset's files live, known without importing torch or PyG.

`python -m app` checks a real OGB dataset's files right after composing the config, before the
seconds of `import torch_geometric`, so a missing dataset is named at once (`precheck`).

* `cache_path`: `<root>/<name>-<fingerprint>/data.pt`, the generated or converted tensors
  (written and read by `app.dataset.cache`), keyed by `dataset_fingerprint`;
* `user_files` / `content_fingerprint`: the files of a user's graph (`dataset=pyg_file` or
  `dataset=arrays`) and the hash of their bytes, so its partitions are keyed by content;
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

from app.config import USER_DATASETS, DatasetConfig

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
    if cfg.name in USER_DATASETS:  # the split of a graph without masks depends on these too
        key |= {k: fields[k] for k in SPLIT_KEYS}
        key |= {"seed": seed, "content": content_fingerprint(user_files(cfg))}
    blob = json.dumps(key, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def cache_path(cfg: DatasetConfig, seed: int) -> Path:
    return Path(cfg.root) / f"{cfg.name}-{dataset_fingerprint(cfg, seed)}" / "data.pt"


class DataMissingError(FileNotFoundError):
    """A dataset's file is missing or unusable; the message names it and the fix."""


class OgbDataMissingError(DataMissingError):
    """An OGB file is missing under `dataset.root`; it is never downloaded at run time."""


# dataset=arrays: the files of the folder (each `<name>.npy` or `<name>.pt`)
ARRAYS_REQUIRED = ("edge_index", "features", "labels")
ARRAYS_OPTIONAL = ("train_mask", "val_mask", "test_mask")
ARRAY_SUFFIXES = (".npy", ".pt")
HASH_BLOCK = 1 << 22
_HASHES: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256 of the bytes


def array_file(folder: Path, name: str) -> Path | None:
    """`<folder>/<name>.npy` or `.pt`, whichever exists (None: neither)."""
    found = [folder / f"{name}{s}" for s in ARRAY_SUFFIXES if (folder / f"{name}{s}").is_file()]
    return found[0] if found else None


def user_files(cfg: DatasetConfig) -> dict[str, Path]:
    """{role: file} of a user's graph (`graph`, or each array's name); DataMissingError (one
    line, with the fix) when one is not there."""
    path = Path(cfg.path or "")
    if cfg.name == "pyg_file":
        if not path.is_file():
            raise DataMissingError(
                f"dataset.path={cfg.path}: no such file; write your graph with "
                "torch.save(data, PATH) (a PyG Data or HeteroData) and point dataset.path at it"
            )
        return {"graph": path}
    if not path.is_dir():
        raise DataMissingError(
            f"dataset.path={cfg.path}: no such folder; dataset=arrays reads "
            f"{', '.join(ARRAYS_REQUIRED)} (and optional {', '.join(ARRAYS_OPTIONAL)}) as "
            ".npy or .pt files from it"
        )
    missing = [n for n in ARRAYS_REQUIRED if array_file(path, n) is None]
    if missing:
        raise DataMissingError(
            f"dataset.path={cfg.path}: no {', '.join(f'{n}.npy or {n}.pt' for n in missing)} "
            f"(dataset=arrays needs {', '.join(ARRAYS_REQUIRED)}; the folder has "
            f"{', '.join(sorted(p.name for p in path.iterdir())) or 'nothing'})"
        )
    found = {n: array_file(path, n) for n in ARRAYS_REQUIRED + ARRAYS_OPTIONAL}
    return {n: f for n, f in found.items() if f is not None}


def content_fingerprint(files: dict[str, Path]) -> str:
    """sha256 over the files' roles and bytes, not their names or places: a copy of a graph
    reuses its partition (each file is hashed once per process and version of it)."""
    total = hashlib.sha256()
    for role, path in sorted(files.items()):
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        if key not in _HASHES:
            digest = hashlib.sha256()
            with path.open("rb") as f:
                while block := f.read(HASH_BLOCK):
                    digest.update(block)
            _HASHES[key] = digest.hexdigest()
        total.update(f"{role}:{_HASHES[key]};".encode())
    return total.hexdigest()[:16]


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
    """Before any work: DataMissingError if a file `cfg` reads is missing.

    A user's graph: its file or folder must be there. Nothing to check for synthetic datasets,
    or once the converted tensors are cached (a job
    that reuses its partition may then run without the raw files).
    """
    if cfg.name in USER_DATASETS:
        user_files(cfg)
        return
    spec = SPECS.get(cfg.name)
    if spec is None or cache_path(cfg, seed=0).exists():
        return
    check_files(spec, Path(cfg.root))
