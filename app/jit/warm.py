"""Compile the kernels every job uses, once per machine: `python -m app.jit` (`make install`
runs it) or a launcher that finds the cache cold, before it starts its processes.

The work is a small real pipeline, so each kernel compiles for the argument types jobs pass
it: METIS with relabelling and the locality order, both samplers (all variants), a feature
gather into batch positions, the model and layer-wise kernels (also for mixed index dtypes),
the stream partitioner. A marker file, named by a hash of the kernel modules' sources and this
machine's CPU, records that the cache holds them; a kernel compiled later is announced
(`app.jit.watch`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import tempfile
import time
from pathlib import Path

from app.jit import cache_root

# the modules whose kernels `warm` compiles: their sources name the marker
WARMED = (
    "app/sampler/kernel.py",
    "app/sampler/csc.py",
    "app/model/ops/numba_cpu.py",
    "app/partition/assign.py",
    "app/partition/order.py",
    "app/partition/writer.py",
    "app/partition/stream.py",
    "app/distributed/feature_store.py",
    "app/jit/warm.py",
)
ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("distgnn")


def marker() -> Path:
    """`<cache>/warm-<hash>`: exists once `warm` compiled these sources on this CPU."""
    from llvmlite import binding

    digest = hashlib.sha256(binding.get_host_cpu_name().encode())
    for rel in WARMED:
        digest.update((ROOT / rel).read_bytes())
    return cache_root() / f"warm-{digest.hexdigest()[:16]}"


def is_warm() -> bool:
    return marker().exists()


def _pipeline() -> None:
    import numpy as np
    import torch

    from app.config import DatasetConfig
    from app.dataset.synthetic import generate_products, to_data
    from app.distributed.feature_store import gather_rows
    from app.distributed.sampler import DistNeighborSampler, SamplerOptions
    from app.distributed.server import load_stores
    from app.loader import NeighborLoader
    from app.model.ops import numba_cpu
    from app.partition.writer import partition_graph
    from app.sampler.kernel import warmup

    warmup()
    numba_cpu.warm()
    cfg = DatasetConfig(num_nodes=600, num_features=4, num_classes=3, avg_degree=6.0)
    data = to_data(generate_products(cfg, seed=0))
    for _ in NeighborLoader(data, [3, 2], batch_size=64, input_nodes=data.train_mask):
        break
    with tempfile.TemporaryDirectory(prefix="distgnn-warm-") as tmp:
        partition_graph(data, Path(tmp, "two"), 2, method="metis", relabel=True, order="locality")
        partition_graph(data, Path(tmp, "one"), 1, method="random")
        fs, gs = load_stores(str(Path(tmp, "one")), 0)
        sampler = DistNeighborSampler((fs, gs), options=SamplerOptions([3, 2]))
        sampler.prepare(1)
        seeds = torch.arange(8)
        sampler.sample_batch(seeds, seeds)
    src = np.ones((4, 2), np.float32)
    gather_rows(src, np.arange(2), np.zeros((3, 2), np.float32), np.array([0, 2]))
    _mixed_index_kernels()
    _stream_partition(cfg)


def _mixed_index_kernels() -> None:
    """The model kernels for an int64 row pointer over int32 columns, as a trainer's sampled
    subgraph passes them (the first smoke run compiled these)."""
    import numpy as np

    from app.model.ops import numba_cpu

    h, out = np.ones((2, 1), np.float32), np.zeros((1, 1), np.float32)
    crow, col = np.array([0, 2], np.int64), np.array([0, 1], np.int32)
    numba_cpu._csr_spmm(crow, col, np.ones(2, np.float32), h, out)
    numba_cpu._csr_mean(crow, col, h, h[:0], out)


def _stream_partition(cfg: object) -> None:
    """The streaming partitioner's kernels (`partition=stream`, a README command)."""
    from app.dataset.chunked import ChunkedGraph
    from app.dataset.synthetic_stream import generate_products_chunked
    from app.partition.stream import stream_partition

    with tempfile.TemporaryDirectory(prefix="distgnn-warm-") as tmp:
        graph = generate_products_chunked(cfg, 0, Path(tmp, "chunked"))  # type: ignore[arg-type]
        stream_partition(
            ChunkedGraph(graph),
            Path(tmp, "parts"),
            2,
            params={},
            fingerprint="warm",
            dataset_fingerprint="warm",
            relabel=True,
            order="locality",
        )


def warm() -> float:
    """Compile (or load) the kernels and mark the cache warm; the seconds it took."""
    from app.jit.watch import paused

    start = time.perf_counter()
    logger = logging.getLogger("distgnn")
    level = logger.level
    logger.setLevel(logging.WARNING)  # the pipeline's own INFO lines (METIS, ...)
    try:
        with contextlib.redirect_stdout(io.StringIO()), paused():  # the partition tables
            _pipeline()
    finally:
        logger.setLevel(level)
    path = marker()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return time.perf_counter() - start


def ensure_warm() -> None:
    """Compile the kernels in this process, once per machine, before a job starts processes
    that would each compile them (one line when it does)."""
    if is_warm():
        return
    log.info("compiling kernels (first run on this machine; cached in %s) ...", cache_root())
    log.info("kernels compiled in %.1f s", warm())
