"""A user's own graph: `dataset=pyg_file` (a `torch.save`d PyG `Data` / `HeteroData`) and
`dataset=arrays` (a folder of `.npy` / `.pt` arrays), brought to the layout every other dataset
has (`app.dataset`'s docstring) and checked as strictly.

`check_graph` lists every problem (shapes, dtypes, edge ids, label range, split sizes), one line
each, and `load_user_graph` raises them as one `ConfigError`, before anything is partitioned.
Files are read with `torch.load(weights_only=True)` (PyG's data classes allowed, nothing else)
and `np.load(allow_pickle=False)`: a graph file never runs code. Without masks the split is
drawn like the synthetic one (`train_frac`, `val_frac`, the seed). Partitions are keyed by the
files' content (`app.dataset.files.content_fingerprint`), so a changed file is partitioned
anew and an unchanged one reuses its partition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from app.config import ConfigError, DatasetConfig
from app.dataset.files import ARRAYS_OPTIONAL, ARRAYS_REQUIRED, array_file, user_files

MASKS = ("train_mask", "val_mask", "test_mask")


def _pyg_classes() -> list[type]:
    """The classes a saved Data / HeteroData pickles besides tensors."""
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import BaseStorage, EdgeStorage, GlobalStorage, NodeStorage

    storages = [BaseStorage, GlobalStorage, NodeStorage, EdgeStorage]
    return [Data, HeteroData, DataEdgeAttr, DataTensorAttr, *storages]


def _fail(cfg: DatasetConfig, problems: list[str]) -> ConfigError:
    return ConfigError("\n".join(f"dataset.path={cfg.path}: {p}" for p in problems))


def read_pyg_file(cfg: DatasetConfig) -> Data | HeteroData:
    """The `Data` / `HeteroData` in `cfg.path`, loaded without running pickled code."""
    (path,) = user_files(cfg).values()
    try:
        with torch.serialization.safe_globals(_pyg_classes()):
            obj = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:
        first = (str(err).strip().splitlines() or [""])[0]
        unsupported = [ln for ln in str(err).splitlines() if "Unsupported global" in ln]
        why = unsupported[0].strip() if unsupported else first
        raise _fail(cfg, [f"not readable as a saved PyG Data/HeteroData: {why[:300]}"]) from None
    if not isinstance(obj, Data | HeteroData):
        raise _fail(cfg, [f"holds a {type(obj).__name__}; expected torch.save(Data or HeteroData)"])
    return obj


def _read_array(path: Path) -> Tensor:
    if path.suffix == ".npy":
        return torch.from_numpy(np.load(path, allow_pickle=False))
    obj = torch.load(path, weights_only=True, map_location="cpu")
    if not isinstance(obj, Tensor):
        raise ValueError(f"holds a {type(obj).__name__}, not a tensor")
    return obj


def read_arrays(cfg: DatasetConfig) -> Data:
    """The folder's arrays as a `Data` (x = features, y = labels)."""
    user_files(cfg)  # the required files are there
    folder, problems, arrays = Path(cfg.path or ""), [], {}
    for name in ARRAYS_REQUIRED + ARRAYS_OPTIONAL:
        path = array_file(folder, name)
        if path is None:
            continue
        try:
            arrays[name] = _read_array(path)
        except Exception as err:
            first = (str(err).strip().splitlines() or [""])[0]
            problems.append(f"{path.name}: not readable ({type(err).__name__}: {first[:200]})")
    if problems:
        raise _fail(cfg, problems)
    renamed = {"features": "x", "labels": "y"}
    return Data(**{renamed.get(k, k): v for k, v in arrays.items()})


def _is_int(t: Tensor) -> bool:
    return not t.dtype.is_floating_point and not t.dtype.is_complex and t.dtype != torch.bool


def _check_edges(name: str, ei: object, n_src: int, n_dst: int) -> list[str]:
    if not isinstance(ei, Tensor) or ei.dim() != 2 or ei.size(0) != 2 or not _is_int(ei):
        shape = list(ei.shape) if isinstance(ei, Tensor) else type(ei).__name__
        dtype = f" {ei.dtype}" if isinstance(ei, Tensor) else ""
        return [f"{name} is {shape}{dtype}; expected an integer tensor [2, num_edges]"]
    if ei.numel() == 0:
        return [f"{name} has no edges"]
    problems = []
    for row, n, end in ((0, n_src, "source"), (1, n_dst, "destination")):
        lo, hi = int(ei[row].min()), int(ei[row].max())
        if lo < 0 or hi >= n:
            problems.append(f"{name} has {end} ids in [{lo}, {hi}] but {n} nodes (0..{n - 1})")
    return problems


def _check_nodes(where: str, store: Any, n: int, labelled: bool) -> list[str]:
    """x, y and the masks of one node store (`where` prefixes the attribute names)."""
    problems = []
    x = getattr(store, "x", None)
    if x is not None:
        if not isinstance(x, Tensor) or x.dim() != 2 or x.size(0) != n:
            shape = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
            problems.append(f"{where}x is {shape}; expected [num_nodes={n}, num_features]")
        elif not x.dtype.is_floating_point:
            problems.append(f"{where}x is {x.dtype}; expected floating-point features")
        elif not bool(torch.isfinite(x).all()):
            bad = int((~torch.isfinite(x)).sum())
            problems.append(f"{where}x has {bad} non-finite values (NaN or inf)")
    if not labelled:
        return problems
    y = store.y
    if not isinstance(y, Tensor) or y.dim() not in (1, 2) or y.size(0) != n or y.numel() != n:
        shape = list(y.shape) if isinstance(y, Tensor) else type(y).__name__
        problems.append(f"{where}y is {shape}; expected one class id per node [{n}]")
    elif not _is_int(y):
        problems.append(f"{where}y is {y.dtype}; expected integer class ids (e.g. int64)")
    for mask in MASKS:
        m = getattr(store, mask, None)
        if m is not None and (not isinstance(m, Tensor) or m.dtype != torch.bool or m.numel() != n):
            what = f"{list(m.shape)} {m.dtype}" if isinstance(m, Tensor) else type(m).__name__
            problems.append(f"{where}{mask} is {what}; expected a bool tensor [{n}]")
    return problems


def _check_split(where: str, store: Any, num_classes: int | None) -> list[str]:
    """Split sizes, overlaps and the label range of the labelled nodes."""
    masks = {m: getattr(store, m) for m in MASKS}
    problems = [f"{where}{m} selects no node" for m, v in masks.items() if not bool(v.any())]
    for i, a in enumerate(MASKS):
        for b in MASKS[i + 1 :]:
            both = int((masks[a] & masks[b]).sum())
            if both:
                problems.append(
                    f"{where}{a} and {b} share {both} nodes; the splits must be disjoint"
                )
    y = store.y.view(-1)
    used = y[masks["train_mask"] | masks["val_mask"] | masks["test_mask"]]
    if used.numel():
        lo, hi = int(used.min()), int(used.max())
        top = num_classes if num_classes is not None else hi + 1
        if lo < 0 or hi >= top:
            problems.append(
                f"{where}y of split nodes lies in [{lo}, {hi}] but num_classes={top}: labels "
                f"must be 0..{top - 1} (unlabelled nodes belong in no mask)"
            )
    return problems


def _labelled_type(data: HeteroData) -> tuple[str | None, list[str]]:
    labelled = [t for t in data.node_types if "y" in data[t]]
    if len(labelled) != 1:
        return None, [f"{len(labelled)} node types have labels y ({labelled}); expected one"]
    return labelled[0], []


def check_graph(data: Data | HeteroData) -> list[str]:
    """Every problem that would stop (or silently spoil) training on `data`, one line each."""
    declared = getattr(data, "num_classes", None)
    declared = int(declared) if isinstance(declared, int | Tensor) else None
    if isinstance(data, HeteroData):
        target, problems = _labelled_type(data)
        sizes = {t: data[t].num_nodes or 0 for t in data.node_types}
        for et in data.edge_types:
            ei = data[et].get("edge_index")
            problems += _check_edges(f"{et} edge_index", ei, sizes[et[0]], sizes[et[2]])
        for t in data.node_types:
            problems += _check_nodes(f"{t}.", data[t], sizes[t], labelled=t == target)
        if target is not None and "x" not in data[target]:
            problems.append(f"{target}.x is missing: the labelled type needs features")
        if problems or target is None:
            return problems
        return _check_split(f"{target}.", data[target], declared)
    problems = []
    for key in ("x", "y"):
        if data.get(key) is None:
            problems.append(f"no {key} ({'node features' if key == 'x' else 'node labels'})")
    rows = {k: data[k].size(0) for k in ("x", "y", *MASKS) if isinstance(data.get(k), Tensor)}
    if len(set(rows.values())) > 1:
        counts = ", ".join(f"{k} {v}" for k, v in rows.items())
        return [*problems, f"per-node tensors disagree on the node count ({counts} rows)"]
    n = data.num_nodes or 0
    problems += _check_edges("edge_index", data.get("edge_index"), n, n)
    if problems:
        return problems
    problems += _check_nodes("", data, n, labelled=True)
    return problems or _check_split("", data, declared)


def _split(store: Any, n: int, cfg: DatasetConfig, seed: int) -> None:
    """Masks drawn like the synthetic datasets' when the graph has none."""
    from app.dataset.synthetic import split_masks

    masks = split_masks(np.random.default_rng(seed), n, cfg.train_frac, cfg.val_frac)
    for name, mask in masks.items():
        setattr(store, name, torch.from_numpy(mask))


def _normalise(store: Any) -> None:
    """float32 features, int64 labels and edge ids: what every model and kernel expects."""
    if isinstance(getattr(store, "x", None), Tensor):
        store.x = store.x.float().contiguous()
    if isinstance(getattr(store, "y", None), Tensor):
        store.y = store.y.long().view(-1)


def load_user_graph(cfg: DatasetConfig, seed: int) -> Data | HeteroData:
    """The user's graph, checked (ConfigError: one line per problem), split and normalised."""
    data = read_pyg_file(cfg) if cfg.name == "pyg_file" else read_arrays(cfg)
    hetero = isinstance(data, HeteroData)
    target = _labelled_type(data)[0] if hetero else None
    store = data[target] if target is not None else data
    if not hetero or target is not None:
        present = [m for m in MASKS if getattr(store, m, None) is not None]
        if present and len(present) < len(MASKS):
            missing = [m for m in MASKS if m not in present]
            raise _fail(
                cfg,
                [
                    f"has {', '.join(present)} but no {', '.join(missing)}: give all "
                    "three masks, or none (split from dataset.train_frac/val_frac)"
                ],
            )
        if not present and getattr(store, "num_nodes", None):
            _split(store, int(store.num_nodes), cfg, seed)
    problems = check_graph(data)
    if problems:
        raise _fail(cfg, problems)
    for s in data.node_stores:
        _normalise(s)
    for s in data.edge_stores:
        s.edge_index = s.edge_index.long().contiguous()
    y = store.y
    declared = getattr(data, "num_classes", None)
    data.num_classes = int(declared) if declared is not None else int(y.max()) + 1
    return data
