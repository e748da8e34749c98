"""End-to-end distributed heterogeneous node classification and link prediction on 2 local nodes.

    python -m bench.e2e_hetero_link [num_nodes] [steps]   # default: 200,000 nodes, 30 steps

Both jobs go through `app.launch.run_job` (plan, partition, spawn 2 trainers + 2 sampler
processes on 127.0.0.1, DDP + RPC) with their experiment files at `num_nodes` nodes
(synthetic_mag: papers, plus ~1.5 authors per paper; synthetic_products: nodes):

* `mag_hetero`: heterogeneous GraphSAGE, `DistEmbedding` rows for author / institution /
  field_of_study (SparseAdam), per-edge-type fan-outs of `sampler=mag`.
* `products_link`: GraphSAGE encoder, dot decoder, binary negatives (ratio 1) in training,
  20 triplet negatives per held-out edge in evaluation (AUC, MRR).

Epochs are capped at `steps` batches; the figures are from the second epoch (the first one
includes numba compilation and page-cache warm-up). Evaluation runs after the last epoch only,
capped at `steps` batches. Rates are per trainer (the job's total / 2). For links, "edges/s"
counts labelled edges (positives + negatives) per second.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from app.config import Config, compose_config
from bench.common import record
from bench.e2e import job_overrides

BENCH = "e2e_hetero_link"
NODES = 2


def bench_config(experiment: str, num_nodes: int, steps: int, out: Path) -> Config:
    """`+experiment=<experiment>` at `num_nodes`, capped epochs, no MLflow, shared data dir."""
    shared = job_overrides(out, num_nodes, steps, nodes=NODES, workers=1)
    return compose_config([f"+experiment={experiment}", *shared])


def run(experiment: str, num_nodes: int, steps: int, out: Path) -> dict[str, float]:
    from app.launch import run_job

    return run_job(bench_config(experiment, num_nodes, steps, out), out / f"job-{experiment}")


def report(experiment: str, res: dict[str, float], unit: str) -> None:
    """Second-epoch time, per-trainer rates and data wait, plus the final quality figures."""
    record(BENCH, f"{experiment}_epoch_time_s", res["epoch_time_s"], "s")
    record(BENCH, f"{experiment}_step_time_s", res["epoch_time_s"] / (res["steps"] / NODES), "s")
    record(BENCH, f"{experiment}_{unit}_per_s_per_trainer", res["seeds_per_s"] / NODES, f"{unit}/s")
    record(
        BENCH,
        f"{experiment}_sampled_edges_per_s_per_trainer",
        res["sampled_edges_per_s"] / NODES,
        "edges/s",
    )
    record(BENCH, f"{experiment}_data_wait_frac", res["data_wait_frac"], "fraction")
    for key in ("test_acc", "test_auc", "test_mrr"):
        if key in res:
            record(BENCH, f"{experiment}_{key}", res[key], "fraction")


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    num_nodes = int(args[0]) if args else 200_000
    steps = int(args[1]) if len(args) > 1 else 30
    with tempfile.TemporaryDirectory(prefix="bench_e2e_hl_") as tmp:
        out = Path(tmp)
        report("mag_hetero", run("mag_hetero", num_nodes, steps, out), "seeds")
        report("products_link", run("products_link", num_nodes, steps, out), "edges")


if __name__ == "__main__":
    main()
