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
    params = partition_params(
        p.num_parts, p.method, p.recursive, p.balance_train, p.balance_edges, p.relabel, cfg.seed,
        p.order,
    )  # fmt: skip
    if p.method == "stream":
        params.update(
            balance_train=p.balance_train, balance_edges=p.balance_edges,
            refine_passes=p.refine_passes,
        )  # fmt: skip
    return params


def _dataset_fingerprint(cfg: Config) -> str:
    from app.dataset import dataset_fingerprint

    return dataset_fingerprint(cfg.dataset, cfg.seed)


def config_fingerprint(cfg: Config, dataset_fp: str | None = None) -> str:
    """Fingerprint of the partition `cfg` asks for: dataset fingerprint + partition params."""
    return partition_fingerprint(dataset_fp or _dataset_fingerprint(cfg), **_params(cfg))


def partition_root(cfg: Config, fingerprint: str | None = None) -> Path:
    """`cfg.partition.root`, or `<output_dir>/partitions/<dataset>-<fp>-<method>-p<P>` plus
    `-relabel` and `-locality` when set.

    `<fp>` is the partition fingerprint (dataset fingerprint + every partition parameter), so
    changing any of them selects another folder instead of clashing with the existing one.
    """
    if cfg.partition.root:
        return Path(cfg.partition.root)
    p = cfg.partition
    fp = fingerprint or config_fingerprint(cfg)
    name = f"{cfg.dataset.name}-{fp}-{p.method}-p{p.num_parts}"
    name += ("-relabel" if p.relabel else "") + ("-locality" if p.order == "locality" else "")
    return Path(cfg.output_dir) / "partitions" / name


def _ensure(cfg: Config, data: Any = None) -> PartitionMeta:
    dataset_fp = _dataset_fingerprint(cfg)
    fp = config_fingerprint(cfg, dataset_fp)
    root = partition_root(cfg, fp)
    existing = find_existing(root, fp, cfg.partition.overwrite)
    if existing is not None:
        log.info("reusing partition %s", root)
        return existing
    if cfg.partition.method == "stream":
        return _stream(cfg, data, root, fp, dataset_fp)
    if cfg.partition.method == "metis":
        advise_on_memory(cfg)
    if data is None:
        from app.dataset import load_dataset

        data = load_dataset(cfg.dataset, cfg.seed)
    return write_partition(cfg, data, root, dataset_fp)


def advise_on_memory(cfg: Config) -> None:
    """METIS holds the whole graph: say so when its estimated peak exceeds the budget."""
    from app.partition.stream import metis_memory_gb

    budget = cfg.partition.memory_budget_gb
    d = cfg.dataset
    need = metis_memory_gb(d.num_nodes, int(d.num_nodes * d.avg_degree), d.num_features)
    if budget is not None and need > budget:
        log.warning(
            "partition.method=metis: estimated peak %.1f GiB > partition.memory_budget_gb=%s; "
            "partition=stream partitions within the budget",
            need,
            budget,
        )
    else:
        log.info("partition.method=metis: estimated peak %.1f GiB (budget %s)", need, budget)


def chunked_graph_root(cfg: Config) -> Path:
    """Where the dataset's chunked copy lives: beside its cache, keyed by its fingerprint."""
    from app.dataset.files import cache_path

    return cache_path(cfg.dataset, cfg.seed).parent / "chunked"


def ensure_chunked(cfg: Config) -> Path:
    """The dataset as a chunked graph, written once: streamed for synthetic_products (the
    edge list is never in memory), converted from the loaded dataset otherwise."""
    from app.dataset.cache import LOCK_TIMEOUT_S
    from app.dataset.chunked import clean_stale, is_current, write_data
    from app.dataset.synthetic_stream import generate_products_chunked
    from app.fsutil import file_lock

    root = chunked_graph_root(cfg)
    if is_current(root):
        return root
    with file_lock(root.parent / ".lock", LOCK_TIMEOUT_S, "another process writing this dataset"):
        if is_current(root):
            return root
        for path in clean_stale(root):  # a killed writer's tmp / spill folders (GBs at scale)
            log.info("removed %s, left by an interrupted writer", path)
        if cfg.dataset.name == "synthetic_products":
            return generate_products_chunked(cfg.dataset, cfg.seed, root)
        from app.dataset import load_dataset

        log.info("%s: loading it to write its chunked copy %s", cfg.dataset.name, root)
        return write_data(load_dataset(cfg.dataset, cfg.seed), root)


def _stream(cfg: Config, data: Any, root: Path, fp: str, dataset_fp: str) -> PartitionMeta:
    """`partition.method=stream`: the chunked graph (of `data` when given) streamed into parts."""
    import shutil

    from app.dataset.chunked import ChunkedGraph, ChunkedGraphError, write_data
    from app.partition.reader import PartitionError
    from app.partition.stream import stream_partition

    p = cfg.partition
    log.info("partition.method=stream: memory budget %s GiB", p.memory_budget_gb)
    tmp = root.parent / f"{root.name}.chunked-input"
    try:
        chunked = write_data(data, tmp) if data is not None else ensure_chunked(cfg)
        return stream_partition(
            ChunkedGraph(chunked), root, p.num_parts, params=_params(cfg), fingerprint=fp,
            dataset_fingerprint=dataset_fp, refine_passes=p.refine_passes,
            balance_train=p.balance_train, balance_edges=p.balance_edges,
            memory_budget_gb=p.memory_budget_gb, seed=cfg.seed, overwrite=p.overwrite,
            relabel=p.relabel, order=p.order,
        )  # fmt: skip
    except ChunkedGraphError as err:  # bad input: one line (`partition error: ...`), rc 1
        raise PartitionError(str(err)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_partition(cfg: Config, data: Any, root: Path, dataset_fp: str) -> PartitionMeta:
    """`partition_graph` of `data` into `root` with the job's `partition.*` settings (or the
    streaming partitioner, through a chunked copy of `data`, for `partition.method=stream`)."""
    p = cfg.partition
    if p.method == "stream":
        return _stream(cfg, data, root, config_fingerprint(cfg, dataset_fp), dataset_fp)
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
        order=p.order,
    )


def ensure_partition(cfg: Config, data: Any = None) -> Path:
    """Root of a complete partition for `cfg`: reused when present, else created.

    The dataset is loaded only when a partition has to be computed (unless `data` is given).
    """
    return _ensure(cfg, data).root


def run_partition_task(cfg: Config) -> dict[str, float]:
    """`python -m app task=partition ...`: ensure the partition and the label / seed files
    PyG-style scripts read beside it (`app.partition.pyg`), print and return its stats."""
    meta = _ensure(cfg)
    if meta.reused:
        print(f"partition {meta.root} is up to date (fingerprint {meta.fingerprint})")
        print(format_stats(meta.stats), flush=True)
    else:
        print(f"partition written to {meta.root}", flush=True)
    from app.partition.pyg import write_side_files

    files = write_side_files(meta.root)  # the label / split files PyG's scripts read
    print(f"label and seed files for PyG-style scripts: {len(files)} beside {meta.root}")
    from app.partition.stream import quality_stats

    derived = quality_stats(meta.stats)
    return stats_for_logging(meta) | {f"partition/{k}": v for k, v in derived.items()}
