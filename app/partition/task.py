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
from app.partition.spec import PartitionSpec
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


def _params(spec: PartitionSpec) -> dict[str, Any]:
    p = spec.partition
    params = partition_params(
        p.num_parts,
        p.method,
        p.recursive,
        p.balance_train,
        p.balance_edges,
        p.relabel,
        spec.seed,
        p.order,
    )
    if p.method == "stream":
        params.update(
            balance_train=p.balance_train,
            balance_edges=p.balance_edges,
            refine_passes=p.refine_passes,
        )
    return params


def _dataset_fingerprint(spec: PartitionSpec) -> str:
    from app.dataset import dataset_fingerprint

    return dataset_fingerprint(spec.dataset, spec.seed)


def config_fingerprint(spec: PartitionSpec, dataset_fp: str | None = None) -> str:
    """Fingerprint of the partition `spec` asks for: dataset fingerprint + partition params."""
    return partition_fingerprint(dataset_fp or _dataset_fingerprint(spec), **_params(spec))


def partition_root(spec: PartitionSpec, fingerprint: str | None = None) -> Path:
    """`spec.partition.root`, or `<output_dir>/partitions/<dataset>-<fp>-<method>-p<P>` plus
    `-relabel` and `-locality` when set.

    `<fp>` is the partition fingerprint (dataset fingerprint + every partition parameter), so
    changing any of them selects another folder instead of clashing with the existing one.
    """
    if spec.partition.root:
        return Path(spec.partition.root)
    p = spec.partition
    fp = fingerprint or config_fingerprint(spec)
    name = f"{spec.dataset.name}-{fp}-{p.method}-p{p.num_parts}"
    name += ("-relabel" if p.relabel else "") + ("-locality" if p.order == "locality" else "")
    return Path(spec.output_dir) / "partitions" / name


def _ensure(spec: PartitionSpec, data: Any = None) -> PartitionMeta:
    dataset_fp = _dataset_fingerprint(spec)
    fp = config_fingerprint(spec, dataset_fp)
    root = partition_root(spec, fp)
    existing = find_existing(root, fp, spec.partition.overwrite)
    if existing is not None:
        log.info("reusing partition %s", root)
        return existing
    if spec.partition.method == "stream":
        return _stream(spec, data, root, fp, dataset_fp)
    if spec.partition.method == "metis":
        advise_on_memory(spec)
    if data is None:
        from app.dataset import load_dataset

        data = load_dataset(spec.dataset, spec.seed)
    return write_partition(spec, data, root, dataset_fp)


def advise_on_memory(spec: PartitionSpec) -> None:
    """METIS holds the whole graph: say so when its estimated peak exceeds the budget."""
    from app.partition.stream import metis_memory_gb

    budget = spec.partition.memory_budget_gb
    d = spec.dataset
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


def chunked_graph_root(spec: PartitionSpec) -> Path:
    """Where the dataset's chunked copy lives: beside its cache, keyed by its fingerprint."""
    from app.dataset.files import cache_path

    return cache_path(spec.dataset, spec.seed).parent / "chunked"


def ensure_chunked(spec: PartitionSpec) -> Path:
    """The dataset as a chunked graph, written once: streamed for synthetic_products /
    synthetic_papers (the edge list is never in memory), converted from the loaded dataset
    otherwise."""
    from app.dataset.cache import LOCK_TIMEOUT_S
    from app.dataset.chunked import clean_stale, is_current, write_data
    from app.dataset.synthetic_stream import generate_products_chunked
    from app.fsutil import file_lock

    root = chunked_graph_root(spec)
    if is_current(root):
        return root
    with file_lock(root.parent / ".lock", LOCK_TIMEOUT_S, "another process writing this dataset"):
        if is_current(root):
            return root
        for path in clean_stale(root):  # a killed writer's tmp / spill folders (GBs at scale)
            log.info("removed %s, left by an interrupted writer", path)
        if spec.dataset.name in ("synthetic_products", "synthetic_papers"):
            return generate_products_chunked(spec.dataset, spec.seed, root)
        from app.dataset import load_dataset

        log.info("%s: loading it to write its chunked copy %s", spec.dataset.name, root)
        return write_data(load_dataset(spec.dataset, spec.seed), root)


def check_stream_disk(spec: PartitionSpec, root: Path) -> None:
    """Refuse, before any work, a chunked generation + stream partitioning whose files would
    not fit (`NotEnoughSpaceError`: one line with the path, the need and the free space).

    The sizes come from the existing chunked graph, or from the config for a graph still to
    be generated (`synthetic_products`); a dataset converted from memory is measured only
    once loaded, so it is not checked here (a disk filling up is still one line naming the file).
    """
    from app.dataset.chunked import ChunkedGraph, is_current
    from app.dataset.synthetic_stream import generation_disk_bytes, num_directed_edges
    from app.fsutil import check_free_space
    from app.partition.stream import stream_disk_bytes

    p, d = spec.partition, spec.dataset
    chunked = chunked_graph_root(spec)
    needs = []
    if is_current(chunked):
        graph = ChunkedGraph(chunked)
        n, e, f = graph.num_nodes, graph.num_edges, graph.num_features
        spill, temporal = not (graph.sorted_by_src and graph.symmetric), "time" in graph.node_names
    elif d.name == "synthetic_products":
        n, e, f, spill, temporal = (
            d.num_nodes,
            num_directed_edges(d),
            d.num_features,
            False,
            d.temporal,
        )
        needs.append((chunked.parent, generation_disk_bytes(d), "generating the chunked graph"))
    else:
        return
    part = stream_disk_bytes(n, e, p.num_parts, f, spill, p.relabel, temporal)
    needs.append((root.parent, part, "stream partitioning"))
    check_free_space(needs)


def _stream(spec: PartitionSpec, data: Any, root: Path, fp: str, dataset_fp: str) -> PartitionMeta:
    """`partition.method=stream`: the chunked graph (of `data` when given) streamed into parts."""
    import shutil

    from app.dataset.chunked import ChunkedGraph, ChunkedGraphError, write_data
    from app.labels import LabelError
    from app.partition.reader import PartitionError
    from app.partition.stream import stream_partition

    p = spec.partition
    log.info("partition.method=stream: memory budget %s GiB", p.memory_budget_gb)
    tmp = root.parent / f"{root.name}.chunked-input"
    try:
        if data is None:
            check_stream_disk(spec, root)
        chunked = write_data(data, tmp) if data is not None else ensure_chunked(spec)
        return stream_partition(
            ChunkedGraph(chunked), root, p.num_parts, params=_params(spec), fingerprint=fp,
            dataset_fingerprint=dataset_fp, refine_passes=p.refine_passes,
            balance_train=p.balance_train, balance_edges=p.balance_edges,
            memory_budget_gb=p.memory_budget_gb, seed=spec.seed, overwrite=p.overwrite,
            relabel=p.relabel, order=p.order,
        )  # fmt: skip
    except (ChunkedGraphError, LabelError) as err:  # bad input: one line, rc 1
        raise PartitionError(str(err)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_partition(spec: PartitionSpec, data: Any, root: Path, dataset_fp: str) -> PartitionMeta:
    """`partition_graph` of `data` into `root` with the job's `partition.*` settings (or the
    streaming partitioner, through a chunked copy of `data`, for `partition.method=stream`).
    Labels out of range are a partition error (`app.labels`): one line, rc 1."""
    from app.labels import LabelError
    from app.partition.reader import PartitionError

    p = spec.partition
    if p.method == "stream":
        return _stream(spec, data, root, config_fingerprint(spec, dataset_fp), dataset_fp)
    try:
        return partition_graph(
            data, root, p.num_parts, method=p.method, recursive=p.recursive,
            balance_train=p.balance_train, balance_edges=p.balance_edges, relabel=p.relabel,
            seed=spec.seed, fingerprint=dataset_fp, overwrite=p.overwrite, order=p.order,
        )  # fmt: skip
    except LabelError as err:
        raise PartitionError(str(err)) from None


def ensure_partition(spec: PartitionSpec, data: Any = None) -> Path:
    """Root of a complete partition for `spec`: reused when present, else created.

    The dataset is loaded only when a partition has to be computed (unless `data` is given).
    """
    return _ensure(spec, data).root


def run_partition_task(cfg: Config) -> dict[str, float]:
    """`python -m app task=partition ...`: ensure the partition and the label / seed files
    PyG-style scripts read beside it (`app.partition.pyg`), print and return its stats."""
    meta = _ensure(PartitionSpec.from_config(cfg))
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
