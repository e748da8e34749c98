"""Refuse jobs that cannot fit in this machine's memory, before anything is generated, and
jobs whose hosts cannot hold their processes, before anything is spawned (`check_host_memory`).

A synthetic graph of `dataset.num_nodes=2000000000` would otherwise grow at hundreds of MB/s
until the machine runs out of memory. The estimate covers generating the synthetic dataset and
partitioning it (the peak of a job: the trainers later hold one part each). Its coefficients
come from measured peak RSS (`bench/` figures in the README: 200k nodes, degree 25, 100
features), rounded up; the check only refuses sizes that cannot fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from app.config import Config, ConfigError
from app.partition.spec import PartitionSpec

# Peak bytes per directed edge and per feature value while generating + partitioning
# (edge index int64 pairs, METIS' symmetric CSR, the writer's sort permutations; features as
# float32 in the generator, the cached dataset and the parts), plus the interpreter + torch.
BYTES_PER_EDGE = 120
BYTES_PER_FEATURE = 12
BYTES_PER_NODE = 200
BASE_BYTES = 1 << 30
# synthetic_mag: all node types per paper, edges of every relation (reverses too) per paper.
MAG_NODES_PER_PAPER = 2.7
MAG_EDGES_PER_CITATION = 4.0
SYNTHETIC = ("synthetic_products", "synthetic_papers", "synthetic_mag")


def estimate_bytes(spec: PartitionSpec) -> int:
    """Peak memory of generating and partitioning `spec`'s synthetic dataset (0: not synthetic).

    OGB datasets have a fixed size on disk and are not estimated. With `partition=stream` the
    graph is never in memory: the peak is that of the chunked generation or of the streaming
    partitioner, whichever is larger (`stream_estimate_bytes`).
    """
    d = spec.dataset
    if d.name not in SYNTHETIC:
        return 0
    if spec.partition.method == "stream":
        return stream_estimate_bytes(spec)
    nodes, edges = float(d.num_nodes), float(d.num_nodes) * d.avg_degree
    if d.name == "synthetic_mag":
        nodes, edges = nodes * MAG_NODES_PER_PAPER, edges * MAG_EDGES_PER_CITATION
    features = float(d.num_nodes) * d.num_features
    return int(
        BASE_BYTES + nodes * BYTES_PER_NODE + edges * BYTES_PER_EDGE + features * BYTES_PER_FEATURE
    )


def stream_estimate_bytes(spec: PartitionSpec) -> int:
    """`partition=stream`: the larger of the chunked generation's and the streaming
    partitioner's estimated peaks (the generator writes source-sorted symmetric chunks, so
    the partitioner reads neighbour lists without a spill)."""
    from app.dataset.synthetic_stream import chunked_generation_gb
    from app.partition.stream import stream_memory_gb

    d, p = spec.dataset, spec.partition
    edges = int(d.num_nodes * d.avg_degree)
    stream = stream_memory_gb(
        d.num_nodes, edges, p.num_parts, d.num_features, spill=False, relabel=p.relabel
    )
    return int(max(chunked_generation_gb(d.num_nodes, d.avg_degree), stream) * 2**30)


def available_bytes() -> int:
    """Memory the OS can give this job now without swapping (MemAvailable)."""
    import psutil

    return int(psutil.virtual_memory().available)


def check_memory(spec: PartitionSpec, available: int | None = None) -> None:
    """ConfigError (one line, with the estimate) when the job cannot fit in memory."""
    need = estimate_bytes(spec)
    have = available_bytes() if available is None else available
    if need > have:
        d = spec.dataset
        raise ConfigError(
            f"dataset.num_nodes={d.num_nodes} (avg_degree={d.avg_degree}, "
            f"num_features={d.num_features}, partition.method={spec.partition.method}): "
            "generating and partitioning needs about "
            f"{need / 2**30:.1f} GiB but {have / 2**30:.1f} GiB is available; lower "
            "dataset.num_nodes or dataset.num_features, or run on a machine with more memory"
        )


# ----------------------------------------------------------------------------- per host
# What each host holds once its processes run (the pre-spawn check: `check_host_memory`). A
# process's fixed cost is its interpreter, imports and compiled kernels (torch, numba; a
# trainer also PyG, MLflow, Hydra, the model): 195-219 MiB PSS for an idle sampler of a 2-node
# job, 176-191 MiB for its imports alone (docs/benchmarks.md, "An idle sampler without PyG"),
# more for a trainer; the launcher of an env-mode host runs beside them. Rounded down: the check
# refuses only jobs that cannot fit, it is not a tight bound.
TRAINER_FIXED_BYTES = 400 << 20
SAMPLER_FIXED_BYTES = 190 << 20
LAUNCHER_FIXED_BYTES = 200 << 20
EDGE_BYTES = 24  # a part's in-edges: row, col and edge id (int64 each)
HALO_BYTES = 16  # per halo node: its id in the part and in the routing tables
# A trainer's batches (measured on 1/10 papers, [15,10,5] x 1024, float16: 4 slots of shared
# memory, 1.1 GB, beside 1.0-1.5 GB of anonymous memory above the fixed cost): a batch's sampled
# nodes carry their features, ids and in-edges (SAMPLED_NODE_BYTES besides the features); a
# sampler writes each into a slot of the trainer's ring (`sampler.concurrency` in flight, the
# batch in hand and the previous one: RING_EXTRA); the trainer widens the features to float32
# and the first layer gathers them again per edge (COMPUTE_COPIES float32 copies).
SAMPLED_NODE_BYTES = 32
RING_EXTRA = 2
COMPUTE_COPIES = 2
EVAL_TABLE_COPIES = 2  # layer-wise: a layer's input rows and its output rows, both held


@dataclass(frozen=True)
class HostMemory:
    """One host's estimated resident bytes, by term (`fixes` says how to shrink each)."""

    host: int
    partition: int  # its part's files (features, labels, in-edges) + the node map
    halo: int  # halo node ids and id maps
    cache: int  # the halo and hot feature caches (sampler.feature_cache_size rows and
    # sampler.hot_cache_bytes, shared on the host)
    processes: int  # fixed cost of every process of the job on the host
    eval_tables: int  # layer-wise evaluation's tables of the host's nodes (0: sampled)
    num_processes: int = 0
    batches: int = 0  # the trainers' sampled batches: shared-memory ring and float32 compute

    @property
    def total(self) -> int:
        return (
            self.partition
            + self.halo
            + self.cache
            + self.processes
            + self.eval_tables
            + self.batches
        )

    def terms(self) -> dict[str, int]:
        return {
            "partition": self.partition,
            "halo": self.halo,
            "cache": self.cache,
            f"{self.num_processes} processes": self.processes,
            "evaluation tables": self.eval_tables,
            "batches": self.batches,
        }


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def feature_bytes(cfg: Config) -> int:
    return 2 if cfg.dataset.feature_dtype == "float16" else 4


def host_processes(cfg: Config) -> tuple[int, int]:
    """(bytes, count) of the fixed cost of one host's processes: its trainers, their samplers
    (`loader.num_workers` each) and, in env mode, the launcher."""
    trainers = cfg.cluster.procs_per_node
    samplers = trainers * cfg.loader.num_workers
    launcher = LAUNCHER_FIXED_BYTES if cfg.cluster.mode != "local" else 0
    fixed = trainers * TRAINER_FIXED_BYTES + samplers * SAMPLER_FIXED_BYTES + launcher
    return fixed, trainers + samplers


def sampled_nodes(cfg: Config, seeds: int, num_nodes: int) -> int:
    """Distinct nodes one batch of `seeds` samples: k = seeds x (1 + f1 + f1*f2 + ...) draws
    for fan-outs f1, f2, ... (-1: every neighbour, so the whole graph), of which
    N (1 - exp(-k/N)) are distinct if drawn uniformly from the graph's N nodes (a small graph
    repeats many: 1/100 papers, 938k draws, 633k distinct). Per-edge-type fan-outs (a dict)
    take each hop's largest."""
    fan = cfg.sampler.num_neighbors
    hops = [max(f) for f in zip(*fan.values(), strict=True)] if isinstance(fan, dict) else fan
    total = width = 1
    for f in hops or []:
        if f < 0:
            return num_nodes
        width *= f
        total += width
    if num_nodes <= 0:
        return seeds * total
    return round(num_nodes * -math.expm1(-seeds * total / num_nodes))


def batch_bytes(cfg: Config, num_nodes: int, num_features: int) -> int:
    """One host's trainers' batches at the largest batch size (evaluation's is often larger):
    with sampler processes, the ring of shared-memory slots each trainer maps; always, the
    trainer's float32 copies while computing (see SAMPLED_NODE_BYTES)."""
    seeds = max(cfg.loader.batch_size, cfg.loader.eval_batch_size)
    nodes = sampled_nodes(cfg, seeds, num_nodes)
    slot = nodes * (num_features * feature_bytes(cfg) + SAMPLED_NODE_BYTES)
    ring = (cfg.sampler.concurrency + RING_EXTRA) * slot if cfg.loader.num_workers > 0 else 0
    compute = COMPUTE_COPIES * nodes * num_features * 4
    return cfg.cluster.procs_per_node * (ring + compute)


def _eval_table_bytes(cfg: Config, nodes: int, num_features: int) -> int:
    """Layer-wise evaluation keeps every layer's rows of the host's nodes in float32 (inputs
    widened, then each layer's output); sampled evaluation holds batches only."""
    if cfg.train.eval_mode != "layerwise":
        return 0
    widest = max(num_features, cfg.model.hidden_channels, cfg.dataset.num_classes)
    return EVAL_TABLE_COPIES * nodes * widest * 4


def estimate_hosts(cfg: Config, root: Path | None = None) -> list[HostMemory]:
    """Every host's estimate: from the partition at `root` when it is written (its files'
    sizes and halo counts), else from the dataset's size (before generating or partitioning).
    OGB data without a partition has no size known before loading: an empty list."""
    if root is not None and (root / "META.json").is_file():
        return _measured_hosts(cfg, root)
    d, parts = cfg.dataset, cfg.partition.num_parts
    if not d.name.startswith("synthetic") or d.name == "synthetic_mag":
        return []
    nodes = -(-d.num_nodes // parts)
    edges = int(d.num_nodes * d.avg_degree / parts)
    part = nodes * (d.num_features * feature_bytes(cfg) + 16) + edges * EDGE_BYTES
    part += 8 * (d.num_nodes + 1)  # the node map, the part's in-edge pointers over all nodes
    halo = min(d.num_nodes - nodes, edges)  # every in-edge could come from another part
    batches = batch_bytes(cfg, d.num_nodes, d.num_features)
    return [_host(cfg, p, part, halo, nodes, d.num_features, batches) for p in range(parts)]


def _measured_hosts(cfg: Config, root: Path) -> list[HostMemory]:
    import json

    meta = json.loads((root / "META.json").read_text())
    stats = {s["part"]: s for s in meta.get("stats", {}).get("parts", [])}
    shared = sum(f.stat().st_size for f in root.glob("node_map*.pt"))
    num_nodes = meta["num_nodes"]  # a count per node type in a heterogeneous partition
    total = sum(num_nodes.values()) if isinstance(num_nodes, dict) else int(num_nodes)
    batches = batch_bytes(cfg, total, cfg.dataset.num_features)
    hosts = []
    for p in range(int(meta["num_parts"])):
        files = sum(f.stat().st_size for f in (root / f"part_{p}").glob("*.pt"))
        s = stats.get(p, {})
        nodes, halo = int(s.get("nodes", 0)), int(s.get("halo", 0))
        hosts.append(_host(cfg, p, files + shared, halo, nodes, cfg.dataset.num_features, batches))
    return hosts


def _host(
    cfg: Config, p: int, part: int, halo: int, nodes: int, features: int, batches: int
) -> HostMemory:
    fixed, count = host_processes(cfg)
    cache_rows = min(cfg.sampler.feature_cache_size, halo)
    return HostMemory(
        host=p,
        partition=part,
        halo=halo * HALO_BYTES,
        cache=cache_rows * features * feature_bytes(cfg) + cfg.sampler.hot_cache_bytes,
        processes=fixed,
        eval_tables=_eval_table_bytes(cfg, nodes, features),
        num_processes=count,
        batches=batches,
    )


def fix_for(term: str, cfg: Config) -> str:
    """How to shrink `term` (the biggest one), naming the keys."""
    more_hosts = f"more hosts (cluster.num_nodes={cfg.cluster.num_nodes * 2})"
    if term == "partition":
        if cfg.dataset.feature_dtype == "float32":
            return f"{more_hosts} or dataset.feature_dtype=float16"
        return more_hosts
    if term == "cache":
        s = cfg.sampler
        hot = f" or sampler.hot_cache_bytes (now {s.hot_cache_bytes})" if s.hot_cache_bytes else ""
        return f"a smaller sampler.feature_cache_size (now {s.feature_cache_size}){hot}"
    if term == "evaluation tables":
        return "train.eval_mode=sampled (sampled evaluation of the val/test nodes)"
    if term == "halo":
        return more_hosts
    if term == "batches":
        return (
            f"smaller batches (loader.batch_size={cfg.loader.batch_size}, "
            f"loader.eval_batch_size={cfg.loader.eval_batch_size}) or fewer "
            f"sampler.num_neighbors ({cfg.sampler.num_neighbors})"
        )
    return (
        f"fewer processes per host (loader.num_workers={cfg.loader.num_workers}, "
        f"cluster.procs_per_node={cfg.cluster.procs_per_node})"
    )


def check_host_memory(cfg: Config, root: Path | None = None, available: int | None = None) -> None:
    """ConfigError (one line: the host, its estimate by term, the biggest term and its fix)
    when a host's processes will not fit. Local mode runs every host on this machine, so their
    sum must fit; env mode checks this machine's host (the largest, as its rank is not needed)."""
    hosts = estimate_hosts(cfg, root)
    if not hosts:
        return
    have = available_bytes() if available is None else available
    local = cfg.cluster.mode == "local"
    worst = max(hosts, key=lambda h: h.total)
    need = sum(h.total for h in hosts) if local else worst.total
    if need <= have:
        return
    name, _ = max(worst.terms().items(), key=lambda kv: kv[1])
    terms = ", ".join(f"{k} {_gib(v)}" for k, v in worst.terms().items())
    where = f"{len(hosts)} hosts on this machine need" if local else "a host needs"
    raise ConfigError(
        f"dataset={cfg.dataset.name} (num_nodes={cfg.dataset.num_nodes}) on "
        f"cluster.num_nodes={cfg.cluster.num_nodes}: {where} about {_gib(need)} but "
        f"{_gib(have)} is available (host {worst.host}: {terms}); the biggest term is "
        f"{name}: use {fix_for(name, cfg)}"
    )


def check_before_work(cfg: Config, spec: PartitionSpec) -> None:
    """Before anything is generated: generating + partitioning must fit (`check_memory`), and a
    training job's hosts must hold their processes (`check_host_memory`: from its partition's
    files when written, else estimated from the dataset's size)."""
    check_memory(spec)
    if cfg.task == "train":
        from app.launch.precheck import expected_partition

        check_host_memory(cfg, expected_partition(spec)[0])
