"""One GPU trainer vs one CPU trainer on the same machine, side by side (products scale).

    python -m bench.gpu [NUM_NODES] [--epochs=2] [--threads=8]

Runs `python -m app +experiment=products_homo cluster.num_nodes=1 dataset.num_nodes=NUM_NODES
train.epochs=E mlflow.enabled=false` twice: `train.device=cuda loader.num_workers=T` (T
sampling threads feed the GPU) and `train.device=cpu`, after generating the dataset once
(not timed). From each run's epoch lines, the last epoch's time, data wait, evaluation time
and test accuracy; for the GPU run, how busy the GPU was during the training epochs
(`nvidia-smi` sampled every 100 ms, cut to each epoch by the epoch lines' timestamps).
Needs CUDA; not part of `make bench`.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

from bench.common import record

BENCH = "gpu"
ROOT = Path("outputs/bench/gpu")
EPOCH_LINE = re.compile(r"\[([\d\- :,]+)\]\[distgnn\.train\]\[INFO\] - epoch (\d+): (.*)$")


def _args(argv: list[str]) -> tuple[int, int, int]:
    nodes, epochs, threads = 2_449_029, 2, 8
    for arg in argv:
        if arg.startswith("--epochs="):
            epochs = int(arg.split("=", 1)[1])
        elif arg.startswith("--threads="):
            threads = int(arg.split("=", 1)[1])
        else:
            nodes = int(arg)
    return nodes, epochs, threads


def _overrides(nodes: int, epochs: int) -> list[str]:
    return [
        "+experiment=products_homo", "cluster.num_nodes=1", f"dataset.num_nodes={nodes}",
        f"train.epochs={epochs}", "mlflow.enabled=false", f"output_dir={ROOT}",
        f"dataset.root={ROOT}/data",
    ]  # fmt: skip


def epochs_of(output: str) -> list[tuple[datetime, dict[str, float]]]:
    """(time of the line, metrics) of every `epoch k: key=value, ...` line."""
    found = []
    for line in re.split(r"[\r\n]", output):  # progress bars end their lines with \r
        m = EPOCH_LINE.search(line.strip())
        if m:
            when = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
            pairs = (kv.split("=", 1) for kv in m.group(3).split(", ") if "=" in kv)
            found.append((when, {k: float(v) for k, v in pairs}))
    return found


def busy_fraction(samples: list[tuple[datetime, float]], start: datetime, end: datetime) -> float:
    """Mean GPU utilization (0-1) of the samples taken in [start, end]."""
    inside = [u for t, u in samples if start <= t <= end]
    return sum(inside) / len(inside) / 100 if inside else float("nan")


def _gpu_samples(text: str) -> list[tuple[datetime, float]]:
    out = []
    for line in text.splitlines():
        stamp, _, util = line.partition(", ")
        try:
            out.append((datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f"), float(util)))
        except ValueError:
            continue
    return out


def run(device: str, nodes: int, epochs: int, threads: int) -> dict[str, float]:
    """One job; its last epoch's figures (plus the GPU's busy fraction on cuda)."""
    extra = [f"train.device={device}", f"hydra.run.dir={ROOT}/run-{device}"]
    if device == "cuda":
        extra.append(f"loader.num_workers={threads}")
    monitor = None
    if device == "cuda":
        monitor = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=timestamp,utilization.gpu", "--format=csv,noheader,nounits",
             "-i", "0", "-lms", "100"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "app", *_overrides(nodes, epochs), *extra],
        capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - start
    samples = []
    if monitor is not None:
        monitor.terminate()
        samples = _gpu_samples(monitor.communicate()[0])
    if proc.returncode != 0:
        raise SystemExit(f"{device} job failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    lines = epochs_of(proc.stdout + proc.stderr)
    when, last = lines[-1]
    out = {k: last[k] for k in ("epoch_time_s", "data_wait_frac", "eval_time_s", "test_acc")}
    out["first_eval_time_s"] = lines[0][1]["eval_time_s"]
    out["job_wall_s"] = wall
    if samples:
        train_end = when - timedelta(seconds=last["eval_time_s"])
        train_start = train_end - timedelta(seconds=last["epoch_time_s"])
        out["gpu_busy_frac"] = busy_fraction(samples, train_start, train_end)
    return out


def main(argv: list[str] | None = None) -> None:
    nodes, epochs, threads = _args(sys.argv[1:] if argv is None else argv)
    from app.config import compose_config
    from app.dataset import load_dataset

    cfg = compose_config(_overrides(nodes, epochs))
    load_dataset(cfg.dataset, cfg.seed)  # generated (or found) before timing
    gpu = run("cuda", nodes, epochs, threads)
    cpu = run("cpu", nodes, epochs, threads)
    scale = f"{nodes}n"
    for key, unit in (("epoch_time_s", "s"), ("eval_time_s", "s"), ("first_eval_time_s", "s")):
        record(BENCH, f"{scale}_gpu_{key}", gpu[key], unit, f"cpu {cpu[key]:.3f} s",
               gpu[key] / cpu[key])  # fmt: skip
    for key in ("data_wait_frac", "test_acc"):
        record(BENCH, f"{scale}_gpu_{key}", gpu[key], "", f"cpu {cpu[key]:.4f}")
    record(BENCH, f"{scale}_gpu_busy_frac", gpu.get("gpu_busy_frac", float("nan")), "")
    record(BENCH, f"{scale}_job_wall_s", gpu["job_wall_s"], "s", f"cpu {cpu['job_wall_s']:.1f} s")


if __name__ == "__main__":
    main()
