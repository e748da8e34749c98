"""Bytes on the wire per training batch of a 2-node job on 127.0.0.1, and its accuracy.

    python -m bench.wire_bytes [num_nodes] [BASELINE_TREE|-] [VARIANTS]

Every run is the same 2-node training job (`python -m app`, a real process per run, 2 trainers
with a sampler process each, DDP + RPC on loopback): synthetic_products, fan-out [15, 10, 5],
batch 1024, GraphSAGE 3 x 256, `EPOCHS` full epochs, the halo cache at `CACHE_ROWS` rows (part
of the halo, as on a products-scale graph). Its own counters give the bytes: remote feature
bytes and hop bytes per batch, summed over the trainers and averaged over the job's epochs
(rank 0's epoch lines, weighted by steps: the train loader's window samples the next epoch's
first batches in the epoch before, so one epoch's traffic is not its own batches'; the caches'
one-time fill is not counted), test accuracy beside.

Runs, in this order: `stored` (features as the store holds them, float32), `wire16`
(`sampler.feature_wire_dtype=float16`: the explicit opt-in), `store16`
(`dataset.feature_dtype=float16`: a float16 store, on the wire as stored), `hot1MB` and
`hot4MB` (`stored` plus the hot-node cache, `sampler.hot_cache_bytes`, of 1 and 4 MB per node:
about 2.5k and 10k rows, beside the halo cache's 5k), `wire16_hot4MB` (both cuts). `VARIANTS` on the command line (comma
separated names) runs only those. With a
`BASELINE_TREE` (a checkout of the commit before, e.g. from `git archive`), `stored` runs there
first as `before`: its feature counter counts rows received only (not the ids sent), so the
ratios to it are conservative.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import record
from bench.hosts import epoch_lines

BENCH = "wire_bytes"
ROOT = Path(__file__).resolve().parents[1]
EPOCHS = 3
CACHE_ROWS = 5000
VARIANTS = {
    "stored": [],
    "wire16": ["sampler.feature_wire_dtype=float16"],
    "store16": ["dataset.feature_dtype=float16"],
    "hot1MB": ["sampler.hot_cache_bytes=1000000"],
    "hot4MB": ["sampler.hot_cache_bytes=4000000"],
    "wire16_hot4MB": ["sampler.feature_wire_dtype=float16", "sampler.hot_cache_bytes=4000000"],
}


def run(tree: Path, out: Path, name: str, num_nodes: int, extra: list[str]) -> dict:
    """One 2-node job with the code of `tree`; its result.json."""
    store = "16" if "dataset.feature_dtype=float16" in extra else "32"
    job = out / name
    args = [
        "+experiment=products_homo", "cluster.num_nodes=2", f"dataset.num_nodes={num_nodes}",
        f"dataset.root={out}/data{store}", f"partition.root={out}/part{store}",
        "loader.batch_size=1024", "loader.num_workers=1", f"train.epochs={EPOCHS}",
        "train.checkpoint=false", "mlflow.enabled=false", "sampler.num_neighbors=[15,10,5]",
        "model.num_layers=3", "model.hidden_channels=256",
        f"sampler.feature_cache_size={CACHE_ROWS}", f"output_dir={out}", f"hydra.run.dir={job}",
        *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{tree}:{tree}/launchers"}
    proc = subprocess.run(
        [sys.executable, "-m", "app", *args], cwd=tree, env=env, capture_output=True, text=True
    )
    if proc.returncode:
        raise SystemExit(f"{name} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return {**json.loads((job / "result.json").read_text()), **job_means(job)}


BYTES = ("remote_feature_bytes_per_batch", "hop_bytes_per_batch")
RATES = ("cache_hit_rate", "hot_cache_hit_rate")


def job_means(job: Path) -> dict[str, float]:
    """The job's per-batch bytes over all its epochs (weighted by steps), and its cache hit
    rates over the epochs that fetched anything (an epoch whose batches were all sampled in
    the epoch before logs a rate of 0 for no rows)."""
    epochs = epoch_lines(job)
    steps = sum(float(e["steps"]) for e in epochs)
    out = {k: sum(float(e[k]) * float(e["steps"]) for e in epochs) / steps for k in BYTES}
    busy = [e for e in epochs if any(float(e[k]) for k in (*BYTES, "cache_hit_rate"))]
    busy_steps = sum(float(e["steps"]) for e in busy) or 1.0
    for k in RATES:
        out[k] = sum(float(e.get(k, 0.0)) * float(e["steps"]) for e in busy) / busy_steps
    return out


def main(
    num_nodes: int = 40_000, baseline: Path | None = None, only: list[str] | None = None
) -> None:
    unknown = sorted(set(only or []) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants {unknown}: choose from {sorted(VARIANTS)}")
    runs = ([("before", baseline, [])] if baseline else []) + [
        (name, ROOT, extra) for name, extra in VARIANTS.items() if not only or name in only
    ]
    with tempfile.TemporaryDirectory(prefix="distgnn-bench-wire-") as tmp:
        got = {name: run(tree, Path(tmp), name, num_nodes, extra) for name, tree, extra in runs}
    ref = "before" if baseline else next(iter(got))
    base = got[ref]["remote_feature_bytes_per_batch"] + got[ref]["hop_bytes_per_batch"]
    for name, res in got.items():
        feat, hop = res["remote_feature_bytes_per_batch"], res["hop_bytes_per_batch"]
        record(BENCH, f"{name}_feature_wire_bytes_per_batch", feat, "bytes")
        record(BENCH, f"{name}_hop_wire_bytes_per_batch", hop, "bytes")
        total = feat + hop
        record(BENCH, f"{name}_wire_bytes_per_batch", total, "bytes", ref, total / base)
        record(BENCH, f"{name}_test_acc", res["test_acc"], "fraction")
        record(BENCH, f"{name}_cache_hit_rate", res["cache_hit_rate"], "fraction")
        hot = res.get("hot_cache_hit_rate", 0.0)  # a baseline tree may not have the hot cache
        record(BENCH, f"{name}_hot_cache_hit_rate", hot, "fraction")


if __name__ == "__main__":
    argv = sys.argv[1:]
    tree = Path(argv[1]) if len(argv) > 1 and argv[1] != "-" else None
    only = argv[2].split(",") if len(argv) > 2 else None
    main(int(argv[0]) if argv else 40_000, tree, only)
