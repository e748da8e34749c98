"""`task=partition` and the reuse-or-create step every training job runs before it starts.

The partition folder is named after what determines its content, so a config that changes
the dataset or any partition parameter gets a different folder and an unchanged one reuses
the existing partition without loading the dataset.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from app.config import Config
from app.partition.writer import (
    PartitionMeta,
    find_existing,
    format_stats,
    partition_fingerprint,
    partition_graph,
    partition_params,
    stats_for_logging,
)

log = logging.getLogger("distgnn")


def _params(cfg: Config) -> dict[str, Any]:
    p = cfg.partition
    return partition_params(
        p.num_parts, p.method, p.recursive, p.balance_train, p.balance_edges, p.relabel, cfg.seed
    )


def _dataset_fingerprint(cfg: Config) -> str:
    from app.dataset import dataset_fingerprint

    return dataset_fingerprint(cfg.dataset, cfg.seed)


def config_fingerprint(cfg: Config, dataset_fp: str | None = None) -> str:
    """Fingerprint of the partition `cfg` asks for: dataset fingerprint + partition params."""
    return partition_fingerprint(dataset_fp or _dataset_fingerprint(cfg), **_params(cfg))


def partition_root(cfg: Config, fingerprint: str | None = None) -> Path:
    """`cfg.partition.root`, or `<output_dir>/partitions/<dataset>-<fp>-<method>-p<P>[-relabel]`.

    `<fp>` is the partition fingerprint (dataset fingerprint + every partition parameter), so
    changing any of them selects another folder instead of clashing with the existing one.
    """
    if cfg.partition.root:
        return Path(cfg.partition.root)
    p = cfg.partition
    fp = fingerprint or config_fingerprint(cfg)
    name = f"{cfg.dataset.name}-{fp}-{p.method}-p{p.num_parts}"
    return Path(cfg.output_dir) / "partitions" / (name + ("-relabel" if p.relabel else ""))


def _ensure(cfg: Config, data: Any = None) -> PartitionMeta:
    dataset_fp = _dataset_fingerprint(cfg)
    fp = config_fingerprint(cfg, dataset_fp)
    root = partition_root(cfg, fp)
    existing = find_existing(root, fp, cfg.partition.overwrite)
    if existing is not None:
        log.info("reusing partition %s", root)
        return existing
    if data is None:
        from app.dataset import load_dataset

        data = load_dataset(cfg.dataset, cfg.seed)
    return write_partition(cfg, data, root, dataset_fp)


def write_partition(cfg: Config, data: Any, root: Path, dataset_fp: str) -> PartitionMeta:
    """`partition_graph` of `data` into `root` with the job's `partition.*` settings."""
    p = cfg.partition
    return partition_graph(
        data,
        root,
        p.num_parts,
        method=p.method,
        recursive=p.recursive,
        balance_train=p.balance_train,
        balance_edges=p.balance_edges,
        relabel=p.relabel,
        seed=cfg.seed,
        fingerprint=dataset_fp,
        overwrite=p.overwrite,
    )


def ensure_partition(cfg: Config, data: Any = None) -> Path:
    """Root of a complete partition for `cfg`: reused when present, else created.

    The dataset is loaded only when a partition has to be computed (unless `data` is given).
    """
    return _ensure(cfg, data).root


def run_partition_task(cfg: Config) -> dict[str, float]:
    """`python -m app task=partition ...`: ensure the partition, print and return its stats."""
    meta = _ensure(cfg)
    if meta.reused:
        print(f"partition {meta.root} is up to date (fingerprint {meta.fingerprint})")
        print(format_stats(meta.stats), flush=True)
    else:
        print(f"partition written to {meta.root}", flush=True)
    return stats_for_logging(meta)
