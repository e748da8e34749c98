"""End-to-end distributed training: epoch time, seeds/s per trainer and data wait, 1 vs 2 nodes.

    python -m bench.e2e [num_nodes] [steps]      # default: 200,000 nodes, 10 steps per epoch

Both runs go through `app.launch.run_job` (plan, partition, spawn trainers + sampler processes on
127.0.0.1, DDP + RPC) on the same synthetic_products graph with PyG's example settings:
fan-out [15,10,5], batch 1024, GraphSAGE 3 layers, hidden 256; each size runs twice: with one
sampler process per trainer (`loader.num_workers=1`, `w1`) and sampling on threads inside the
trainer (`num_workers=0`, `w0`).
Epochs are capped at `steps` batches; the figures are from the second epoch (the first one
includes numba compilation and the warm-up of the page cache). Evaluation runs once, capped too.

References (measured on this machine with PyG 2.8 + pyg-lib, which this environment lacks, so
not re-run here): PyG single process ≈ 3.5 s per batch; PyG's distributed example on 2 local
nodes ≈ 0.27 batches/s for both ranks together.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from app.config import Config, compose_config
from bench.common import record

BENCH = "e2e"
PYG_DIST_2NODE_SEEDS_S = 0.27 * 1024  # both ranks together
PYG_SINGLE_SEEDS_S = 1024 / 3.5


def job_overrides(out: Path, num_nodes: int, steps: int, nodes: int, workers: int) -> list[str]:
    """What every end-to-end bench job shares: data under `out`, batch 1024, two capped epochs
    (figures come from the second), evaluation once, no checkpoints, no MLflow."""
    return [
        f"output_dir={out}",
        f"dataset.root={out}/data",
        f"dataset.num_nodes={num_nodes}",
        "loader.batch_size=1024",
        "loader.eval_batch_size=1024",
        f"loader.num_workers={workers}",
        "train.epochs=2",
        "train.eval_every=100",
        f"train.max_steps_per_epoch={steps}",
        "train.checkpoint=false",
        "mlflow.enabled=false",
        f"cluster.num_nodes={nodes}",
    ]


def bench_config(num_nodes: int, nodes: int, workers: int, steps: int, out: Path) -> Config:
    """The benchmark job on `nodes` local cluster nodes (shared dataset / partition cache)."""
    model = ["sampler.num_neighbors=[15,10,5]", "sampler.concurrency=2", "model.num_layers=3",
             "model.hidden_channels=256"]  # fmt: skip
    return compose_config(job_overrides(out, num_nodes, steps, nodes, workers) + model)


def run(num_nodes: int, nodes: int, workers: int, steps: int, out: Path) -> dict[str, float]:
    from app.launch import run_job

    cfg = bench_config(num_nodes, nodes, workers, steps, out)
    return run_job(cfg, out / f"job-{nodes}node-w{workers}")


def report(nodes: int, workers: int, res: dict[str, float]) -> None:
    """Per-trainer rate, step time and data wait of one run (second epoch)."""
    tag = f"{nodes}node_w{workers}"
    record(BENCH, f"epoch_time_{tag}_s", res["epoch_time_s"], "s")
    record(BENCH, f"step_time_{tag}_s", res["epoch_time_s"] / (res["steps"] / nodes), "s")
    record(BENCH, f"seeds_per_s_per_trainer_{tag}", res["seeds_per_s"] / nodes, "seeds/s")
    record(BENCH, f"data_wait_frac_{tag}", res["data_wait_frac"], "fraction")
    ref, name = (
        (PYG_SINGLE_SEEDS_S, "single process")
        if nodes == 1
        else (
            PYG_DIST_2NODE_SEEDS_S,
            "dist example 2 nodes",
        )
    )
    total = res["seeds_per_s"]
    label = f"PyG 2.8 {name} (reference figure, not re-run)"
    record(BENCH, f"seeds_per_s_total_{tag}", total, "seeds/s", label, total / ref)


def main(num_nodes: int = 200_000, steps: int = 10) -> None:
    """1 and 2 nodes, each with sampler processes (w1) and with in-trainer sampling (w0)."""
    runs = [(n, w) for n in (1, 2) for w in (1, 0)]
    with tempfile.TemporaryDirectory(prefix="distgnn-bench-e2e-") as tmp:
        results = {(n, w): run(num_nodes, n, w, steps, Path(tmp)) for n, w in runs}
    for (n, w), res in results.items():
        report(n, w, res)
    for w in (1, 0):
        one, two = results[(1, w)]["seeds_per_s"], results[(2, w)]["seeds_per_s"]
        record(BENCH, f"speedup_2node_vs_1node_w{w}", two / one, "x", "1 node, same run", two / one)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 200_000, int(args[1]) if len(args) > 1 else 10)
