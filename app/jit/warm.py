"""Compile the kernels every job uses, once per machine: `python -m app.jit` (`make install`
runs it) or a launcher that finds the cache cold, before it starts its processes.

The work is a small real pipeline, so each kernel compiles for the argument types jobs pass
it: METIS with relabelling and the locality order, both samplers (all variants), a feature
gather into batch positions, the model and layer-wise kernels. A marker file, named by a hash
of the kernel modules' sources and this machine's CPU, records that the cache holds them; the
stream partitioner's kernels compile on first use (announced by `app.jit.watch`).
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
