"""Datasets: a name in `DatasetConfig` → a PyG `Data` (products-like) or `HeteroData` (mag-like).

* `synthetic_products` / `synthetic_papers` / `synthetic_mag`: generated from `(cfg, seed)` and
  cached under `cfg.root` (see `cache.py`); statistics in `synthetic.py` / `mag.py`.
  `synthetic_papers` is the products recipe with ogbn-papers100M's shape (its config:
  `conf/dataset/synthetic_papers.yaml`), generated straight to chunks for `partition=stream`.
* `ogbn_products` / `ogbn_papers100M` / `ogbn_mag`: the real OGB data read from `cfg.root`
  (never downloaded).
* `pyg_file` / `arrays`: the user's own graph at `cfg.path`, checked and brought to the same
  layout (`user.py`).

Homogeneous `Data`: `x` float32 (or `cfg.feature_dtype`) [N, F], `y` int64 [N], `edge_index` int64 [2, E] (row = source),
disjoint bool `train_mask` / `val_mask` / `test_mask`, `num_classes`, and `time` int64 [N] when
`cfg.temporal`. `HeteroData`: ogbn-mag's types and relations plus `rev_*` reverses, features,
labels, masks (and `time`) on papers, `num_nodes` on every type.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from app.config import DATASETS, USER_DATASETS, ConfigError, DatasetConfig
from app.dataset.files import OgbDataMissingError, cache_path, dataset_fingerprint

if TYPE_CHECKING:
    from torch_geometric.data import Data, HeteroData

__all__ = ["OgbDataMissingError", "dataset_fingerprint", "load_dataset"]

log = logging.getLogger(__name__)


def load_dataset(cfg: DatasetConfig, seed: int) -> Data | HeteroData:
    """The dataset `cfg.name`; synthetic ones are generated once per fingerprint, then cached.

    torch and PyG are imported here, on first use, so that `app.dataset.files` (what
    `python -m app` checks before anything heavy) stays free of them."""
    from app.dataset.cache import cached
    from app.dataset.mag import generate_mag, to_hetero_data
    from app.dataset.ogb import load_ogb
    from app.dataset.synthetic import generate_products, to_data

    check_sizes(cfg)
    if cfg.name in USER_DATASETS:
        from app.dataset.user import load_user_graph

        data = load_user_graph(cfg, seed)
        log.info("dataset %s (%s): %s", cfg.name, cfg.path, summary(data))
        return data
    generators = {
        "synthetic_products": generate_products,
        "synthetic_papers": generate_products,  # same recipe, papers100M's shape (its yaml)
        "synthetic_mag": generate_mag,
    }
    if cfg.name in generators:
        path = cache_path(cfg, seed)
        obj = cached(path, lambda: generators[cfg.name](cfg, seed))
    elif cfg.name in ("ogbn_products", "ogbn_papers100M", "ogbn_mag"):
        obj = load_ogb(cfg)
    else:
        raise ConfigError(f"dataset.name={cfg.name!r}: expected one of {', '.join(DATASETS)}")
    data = to_hetero_data(obj) if obj["kind"] == "hetero" else to_data(obj)
    log.info("dataset %s: %s", cfg.name, summary(data))
    return data


def check_sizes(cfg: DatasetConfig) -> None:
    """Reject sizes the generators cannot honour, naming the key (also when called directly)."""
    limits = {
        "num_nodes": cfg.num_nodes >= 1,
        "num_features": cfg.num_features >= 1,
        "num_classes": cfg.num_classes >= 1,
        "avg_degree": cfg.avg_degree >= 0,
        "num_communities": cfg.num_communities >= 0,
        "train_frac": 0 < cfg.train_frac
        and 0 <= cfg.val_frac
        and cfg.train_frac + cfg.val_frac < 1,
        "test_frac": 0 <= cfg.test_frac and cfg.train_frac + cfg.val_frac + cfg.test_frac <= 1,
    }
    for key, ok in limits.items():
        if not ok:
            value = getattr(cfg, key)
            raise ConfigError(f"dataset.{key}={value!r}: out of range (see app/config.py)")


def summary(data: Data | HeteroData) -> str:
    """One line: node / edge counts and classes."""
    from torch_geometric.data import HeteroData

    if isinstance(data, HeteroData):
        nodes = ", ".join(f"{t}={data[t].num_nodes:,}" for t in data.node_types)
        edges = sum(data[et].edge_index.size(1) for et in data.edge_types)
        return (
            f"{nodes}; {edges:,} edges ({len(data.edge_types)} types); {data.num_classes} classes"
        )
    return f"{data.num_nodes:,} nodes, {data.num_edges:,} edges, {data.num_classes} classes"
