"""Partitioner benchmark: time, peak memory and edge cut of METIS vs random vs stream.

`python -m bench.partition` uses a 200k-node synthetic_products graph (avg in-degree 20, ~4M
edges), 2 and 4 parts; `--products` uses ogbn-products scale (2.45M nodes, ~62M edges; heavy,
run once): METIS (today's path: the graph in memory) vs the streaming partitioner under a
2 GiB budget (`partition=stream`), 4 parts, plus the dataset generated in memory vs in chunks.
METIS runs there only when MemAvailable >= 14 GiB (it peaks at ~8 GiB), else it is skipped
and said so. `--scaling` streams synthetic graphs of 1M, 2.45M and 10M nodes (same degree)
under the budget, for the memory / time fit (`--scaling 1000000 2449029` picks sizes).
`--estimates` compares measured peaks with the memory models' estimates (250k, 500k, 1M nodes).
The graph is generated once and saved (as graph.pt for METIS / random, as the chunked format
for stream: the same graph); every step (each generation, each configuration) runs in a fresh
subprocess of this small parent, so each peak RSS is that step's own (ru_maxrss would include
the parent's size at the fork: the stream side reports VmHWM, `stream.own_peak_rss_gb`).

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
CONFIGS = {
    "200k": [
        ("metis", 2),
        ("random", 2),
        ("stream", 2),
        ("metis", 4),
        ("random", 4),
        ("stream", 4),
    ],
    "products": [("metis", 4), ("stream", 4)],
}
SCALES = {
    "200k": {"num_nodes": 200_000, "avg_degree": 20.0},
    "products": {"num_nodes": 2_449_029, "avg_degree": 25.3},
}
BUDGET_GB = 2.0  # the streaming partitioner's partition.memory_budget_gb
METIS_MIN_FREE_GB = 14.0  # products-scale METIS peaks at ~8 GiB; leave room for others
SCALING_NODES = [1_000_000, 2_449_029, 10_000_000]
ESTIMATE_NODES = [250_000, 500_000, 1_000_000]


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
    from app.partition.reader import load_partition

    if method.startswith("stream"):
        from app.dataset.chunked import ChunkedGraph
        from app.partition.stream import stream_partition

        locality = method == "stream-locality"  # relabel + partition.order=locality
        meta = stream_partition(
            ChunkedGraph(graph), root, num_parts, params={"method": method},
            fingerprint="bench", dataset_fingerprint="bench", memory_budget_gb=BUDGET_GB,
            overwrite=True, relabel=locality, order="locality" if locality else "original",
        )  # fmt: skip
    else:
        from torch_geometric.data import Data

        from app.partition.writer import partition_graph

        data = Data(**torch.load(graph, weights_only=True, mmap=True))
        meta = partition_graph(
            data, root, num_parts, method=method, fingerprint="bench", overwrite=True
        )
    out = {k: meta.stats[k] for k in ("time_s", "peak_rss_gb", "edge_cut_frac")}
    out["estimated_peak_gb"] = meta.stats.get("estimated_peak_gb", 0.0)
    for key in ("train", "edges"):  # max part / mean part: 1.0 is perfect balance
        values = [r[key] for r in meta.stats["parts"]]
        out[f"{key}_imbalance"] = max(values) * len(values) / sum(values)
    for verify in (False, True):  # page cache is warm: this is the CPU cost of each step
        start = time.perf_counter()
        load_partition(root, 0, expected_num_parts=num_parts, verify=verify)
        out["load_verify_s" if verify else "load_s"] = time.perf_counter() - start
    return out


def generate_chunked(num_nodes: int, avg_degree: float, root: Path) -> dict[str, float]:
    """Stream synthetic_products into the chunked format (in this process): time and peak."""
    from app.config import DatasetConfig
    from app.dataset.synthetic_stream import generate_products_chunked
    from app.partition.stream import own_peak_rss_gb

    start = time.perf_counter()
    cfg = DatasetConfig(name="synthetic_products", num_nodes=num_nodes, avg_degree=avg_degree)
    generate_products_chunked(cfg, 0, root)
    return {"time_s": time.perf_counter() - start, "peak_rss_gb": own_peak_rss_gb()}


def build_in_memory(num_nodes: int, avg_degree: float, path: Path) -> dict[str, float]:
    """`build_graph` (today's in-memory generator) with its time and peak (this process)."""
    from app.partition.stream import own_peak_rss_gb

    start = time.perf_counter()
    size = build_graph(num_nodes, avg_degree, path)
    return {**size, "time_s": time.perf_counter() - start, "peak_rss_gb": own_peak_rss_gb()}


def _subprocess(args: list[str], what: str) -> dict[str, float]:
    """`python -m bench.partition ARGS` in a fresh interpreter: its last stdout line (JSON)."""
    cmd = [sys.executable, "-m", "bench.partition", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"{what} failed (exit {proc.returncode}): {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(graph: Path, method: str, num_parts: int, work: Path) -> dict[str, float]:
    """`run_one` in a fresh interpreter, so peaks of different configurations never mix."""
    root = work / f"{method}-p{num_parts}"
    try:
        args = ["--one", str(graph), method, str(num_parts), str(root)]
        return _subprocess(args, f"{method} p{num_parts}")
    finally:
        shutil.rmtree(root, ignore_errors=True)  # products-scale parts are GBs each


def measure_generation(num_nodes: int, avg_degree: float, root: Path) -> dict[str, float]:
    """`generate_chunked` in a fresh interpreter (its own peak)."""
    args = ["--gen-chunked", str(num_nodes), str(avg_degree), str(root)]
    return _subprocess(args, f"chunked generation of {num_nodes:,} nodes")


def available_gb() -> float:
    """MemAvailable from /proc/meminfo (GiB)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def scaling(sizes: list[int], avg_degree: float) -> None:
    """Chunked generation + stream partitioning at each size, under BUDGET_GB: for the fit."""
    from app.partition.stream import stream_memory_gb

    for n in sizes:
        num_parts = 4
        while stream_memory_gb(n, int(n * avg_degree), num_parts, 100, False) > BUDGET_GB:
            num_parts *= 2  # one part's edges must fit the budget
        with tempfile.TemporaryDirectory(prefix="bench-partition-", dir="outputs") as tmp:
            gen = measure_generation(n, avg_degree, Path(tmp) / "g")
            r = measure(Path(tmp) / "g", "stream", num_parts, Path(tmp))
        name = f"scaling_{n}"
        record(BENCH, f"{name}_gen_chunked_time", gen["time_s"], "s")
        record(BENCH, f"{name}_gen_chunked_peak_rss", gen["peak_rss_gb"], "GiB")
        record(BENCH, f"{name}_stream_p{num_parts}_time", r["time_s"], "s")
        record(BENCH, f"{name}_stream_p{num_parts}_peak_rss", r["peak_rss_gb"], "GiB")
        record(BENCH, f"{name}_stream_p{num_parts}_edge_cut", 100 * r["edge_cut_frac"], "%")


def estimates(sizes: list[int], avg_degree: float, num_parts: int = 2) -> None:
    """Measured peak RSS (VmHWM of a fresh process) against the memory models' estimates:
    chunked generation (`chunked_generation_gb`) and the streaming partitioner without and
    with relabel + locality order (`stream_memory_gb`), at each size."""
    from app.dataset.synthetic_stream import chunked_generation_gb

    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-partition-", dir="outputs") as tmp:
            gen = measure_generation(n, avg_degree, Path(tmp) / "g")
            want = chunked_generation_gb(n, avg_degree)
            rows = [("gen_chunked", gen["peak_rss_gb"], want)]
            for method in ("stream", "stream-locality"):
                r = measure(Path(tmp) / "g", method, num_parts, Path(tmp))
                rows.append((f"{method}_p{num_parts}", r["peak_rss_gb"], r["estimated_peak_gb"]))
        for what, measured, estimated in rows:
            name = f"estimate_{n}_{what}"
            record(BENCH, f"{name}_peak_rss", measured, "GiB")
            record(BENCH, f"{name}_estimate", estimated, "GiB", "measured", estimated / measured)


def record_config(scale: str, method: str, parts: int, r: dict[str, float]) -> None:
    name = f"{scale}_{method}_p{parts}"
    ref = PYG_REFERENCE if (scale, method, parts) == ("200k", "metis", 2) else None
    record(BENCH, f"{name}_time", r["time_s"], "s", compared_to=ref)
    record(BENCH, f"{name}_peak_rss", r["peak_rss_gb"], "GiB")
    record(BENCH, f"{name}_edge_cut", 100 * r["edge_cut_frac"], "%")
    record(BENCH, f"{name}_train_imbalance", r["train_imbalance"], "max/mean")
    record(BENCH, f"{name}_edge_imbalance", r["edges_imbalance"], "max/mean")
    record(BENCH, f"{name}_load_part0", r["load_s"], "s")
    verify = r["load_verify_s"]
    ratio = verify / r["load_s"]
    record(BENCH, f"{name}_load_part0_verified", verify, "s", "load without checksums", ratio)


def compare(scale: str, results: dict, parts: int) -> None:
    """Side-by-side ratios of the same run: METIS vs random cut, stream vs METIS."""
    metis, rand, stream = (results.get((m, parts)) for m in ("metis", "random", "stream"))
    if metis and rand:
        ratio = metis["edge_cut_frac"] / rand["edge_cut_frac"]
        record(BENCH, f"{scale}_p{parts}_cut_metis_vs_random", ratio, "x", "random", ratio)
    if metis and stream:
        for key, label in (("edge_cut_frac", "cut"), ("time_s", "time"), ("peak_rss_gb", "peak")):
            ratio = stream[key] / metis[key]
            record(BENCH, f"{scale}_p{parts}_{label}_stream_vs_metis", ratio, "x", "metis", ratio)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", action="store_true", help="ogbn-products scale (heavy)")
    parser.add_argument("--scaling", nargs="*", type=int, help="stream at these node counts")
    parser.add_argument("--estimates", nargs="*", type=int, help="peak vs estimate at sizes")
    parser.add_argument("--one", nargs=4, metavar=("GRAPH", "METHOD", "PARTS", "ROOT"))
    parser.add_argument("--gen-chunked", nargs=3, metavar=("NODES", "DEGREE", "ROOT"))
    parser.add_argument("--build", nargs=3, metavar=("NODES", "DEGREE", "PATH"))
    args = parser.parse_args(argv)
    if args.one:
        graph, method, parts, root = args.one
        print(json.dumps(run_one(Path(graph), method, int(parts), Path(root))))
        return
    if args.build:
        nodes, degree, path = args.build
        print(json.dumps(build_in_memory(int(nodes), float(degree), Path(path))))
        return
    if args.gen_chunked:
        nodes, degree, root = args.gen_chunked
        print(json.dumps(generate_chunked(int(nodes), float(degree), Path(root))))
        return
    if args.estimates is not None:
        estimates(args.estimates or ESTIMATE_NODES, SCALES["products"]["avg_degree"])
        return
    if args.scaling is not None:
        scaling(args.scaling or SCALING_NODES, SCALES["products"]["avg_degree"])
        return
    scale = "products" if args.products else "200k"
    configs = CONFIGS[scale]
    if scale == "products" and available_gb() < METIS_MIN_FREE_GB:
        print(f"MemAvailable {available_gb():.1f} GiB < {METIS_MIN_FREE_GB}: METIS skipped")
        configs = [c for c in configs if c[0] != "metis"]
    Path("outputs").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-partition-", dir="outputs") as tmp:
        work = Path(tmp)
        gen = measure_generation(**SCALES[scale], root=work / "chunked")
        results = {}
        if any(m != "stream" for m, _ in configs):
            nodes, degree = SCALES[scale]["num_nodes"], SCALES[scale]["avg_degree"]
            args = ["--build", str(nodes), str(degree), str(work / "graph.pt")]
            gen_memory = _subprocess(args, "in-memory generation")  # keeps this process small
            print(f"graph: {gen_memory['nodes']:,} nodes, {gen_memory['edges']:,} edges")
            for key, unit in (("time_s", "s"), ("peak_rss_gb", "GiB")):
                ratio = gen[key] / gen_memory[key]
                record(BENCH, f"{scale}_gen_in_memory_{key}", gen_memory[key], unit)
                record(BENCH, f"{scale}_gen_chunked_{key}", gen[key], unit, "in memory", ratio)
        else:
            record(BENCH, f"{scale}_gen_chunked_time_s", gen["time_s"], "s")
            record(BENCH, f"{scale}_gen_chunked_peak_rss_gb", gen["peak_rss_gb"], "GiB")
        for method, parts in configs:
            graph = work / ("chunked" if method == "stream" else "graph.pt")
            results[(method, parts)] = measure(graph, method, parts, work)
    for (method, parts), r in results.items():
        record_config(scale, method, parts, r)
    for parts in sorted({p for _, p in configs}):
        compare(scale, results, parts)


if __name__ == "__main__":
    main()
