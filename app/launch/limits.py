"""Refuse jobs that cannot fit in this machine's memory, before anything is generated.

A synthetic graph of `dataset.num_nodes=2000000000` would otherwise grow at hundreds of MB/s
until the machine runs out of memory. The estimate covers generating the synthetic dataset and
partitioning it (the peak of a job: the trainers later hold one part each). Its coefficients
come from measured peak RSS (`bench/` figures in the README: 200k nodes, degree 25, 100
features), rounded up; the check only refuses sizes that cannot fit.
"""

from __future__ import annotations

from app.config import ConfigError
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
