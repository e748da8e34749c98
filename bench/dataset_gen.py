"""Synthetic dataset generation at scale: time, peak RSS, cached-load time.

    python -m bench.dataset_gen [num_nodes] [avg_degree]   # default: ogbn-products scale

Generates `synthetic_products` (2.45M nodes, ~62M directed edges, 100 features by default) into a
temporary root, then loads it again from the cache. Heavy: run it once, not in a loop.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time

from app.config import DatasetConfig
from app.dataset import load_dataset
from bench.common import record

BENCH = "dataset_gen"


def main(num_nodes: int = 2_450_000, avg_degree: float = 25.3) -> None:
    with tempfile.TemporaryDirectory(prefix="distgnn-bench-") as root:
        cfg = DatasetConfig(root=root, num_nodes=num_nodes, avg_degree=avg_degree)
        start = time.perf_counter()
        data = load_dataset(cfg, seed=0)
        generate_s = time.perf_counter() - start
        num_edges = data.num_edges
        del data
        start = time.perf_counter()
        load_dataset(cfg, seed=0)
        load_s = time.perf_counter() - start
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    record(BENCH, f"generate_products_{num_nodes}_s", generate_s, "s")
    record(
        BENCH, f"cached_load_products_{num_nodes}_s", load_s, "s", "generate", load_s / generate_s
    )
    record(BENCH, f"peak_rss_products_{num_nodes}_GiB", peak_gib, "GiB")
    record(BENCH, f"directed_edges_products_{num_nodes}", num_edges, "edges")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 2_450_000, float(args[1]) if len(args) > 1 else 25.3)
