"""A GPU trainer fed by the CPU sampler and by the GPU sampler, side by side, on two workloads.

    python -m bench.gpu [NUM_NODES] [--epochs=2] [--threads=8] [--only=PART,...]

Workloads (products scale, batch 1024): `products_homo`'s fan-out [10, 5] with SAGE 2x128, and
the field's published one, fan-out [15, 10, 5] with SAGE 3x256 (PyG's and DGL's examples).

1. Sampling alone, in this process: the numba kernel (one thread) and the torch sampler on the
   GPU (`sampler.device=cuda`) draw the same 20 seed batches; sampled edges/s of each. Then
   the GPU sampler's host read-backs per batch (`bench.readbacks`' count, and CUDA's count of
   synchronizing calls; hops + 1 expected).
2. Per workload, three jobs of `python -m app +experiment=products_homo cluster.num_nodes=1
   dataset.num_nodes=NUM_NODES train.epochs=E mlflow.enabled=false train.device=cuda`: two with
   `sampler.device=cuda` (CSC and features on the GPU), sampling in the trainer's thread
   (`loader.num_workers=0`, "inline") and in 2 threads on side streams, and one with
   `sampler.device=cpu loader.num_workers=T` (T sampling threads). From each job's epoch lines: the last epoch's
   time, data wait, sampled edges/s (of the training epoch), later evaluation and test
   accuracy, epoch 0's (first) evaluation, and how busy the GPU was in the last training
   epoch (`nvidia-smi` every 100 ms, cut by the epoch lines' timestamps).
3. 20 GPU-sampled training steps per workload under `torch.profiler`: the step's wall time,
   the GPU's busy share, the host's waits for the device per step, and the operations taking
   the most GPU and CPU time (where the remaining gap is); once with the caching allocator's
   default settings, once with `expandable_segments:True` (`ALLOCATOR`).
4. Per workload, the GPU-sampled job's first layer-wise evaluation phase by phase against a
   later one (`python -m bench.first_eval --device=cuda --sampler=cuda`, its records
   `first_eval/...`; at most `FIRST_EVAL_TIMEOUT_S` each).

5. A 2-node job of the [10, 5] workload (`cluster.num_nodes=2`, both trainers on this machine's
   GPUs, round-robin, each fed by T/2 sampler processes on the CPU) whose trainers hold their
   partition's and their node's cache rows on the GPU (`app.distributed.resident`, the
   default), against the same job sending every row (`train.gpu_feature_bytes=0`): the job
   figures above and the share of batch rows read from the GPU.

`--only=` runs the named parts (`sampling`, `jobs`, `profile`, `first-eval`, `dist`), in that
order; every part by default. Each part that fails (or a job that outlives `JOB_TIMEOUT_S`) prints its last lines and the
next part runs: a device check gets one call.

The dataset is generated (or found) before any timing. Needs CUDA: without it, one line says
so and nothing runs. Not part of `make bench`; `bench/gpu_check.sh` runs it on a device.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import record

BENCH = "gpu"
ROOT = Path("outputs/bench/gpu")
EPOCH_LINE = re.compile(r"\[([\d\- :,]+)\]\[distgnn\.train\]\[INFO\] - epoch (\d+): (\w+=.*)$")
WORKLOADS = {  # name -> (fan-out, job overrides)
    "f10_5_sage2x128": ([10, 5], []),
    "f15_10_5_sage3x256": (
        [15, 10, 5],
        ["sampler.num_neighbors=[15,10,5]", "model.num_layers=3", "model.hidden_channels=256"],
    ),
}
PROFILE_STEPS = 20
# the caching allocator's settings part 3 profiles under: torch's default, and segments that
# grow in place (batches' tensors change size every step; a size no cached block fits costs a
# cudaMalloc, and freeing cached blocks to make room a device-wide synchronisation)
ALLOCATOR = {"default": "expandable_segments:False", "expandable": "expandable_segments:True"}
GPU_THREADS = 2  # the GPU sampler's threads, a CUDA stream each
JOB_TIMEOUT_S = 300  # a job that outlives it is reported, and the bench goes on
FIRST_EVAL_TIMEOUT_S = 60  # one bench.first_eval run (data load, loader, two evaluations)
JOB_KEYS = ("epoch_time_s", "data_wait_frac", "sampled_edges_per_s", "eval_time_s", "test_acc")
UNITS = {"sampled_edges_per_s": "edges/s", "epoch_time_s": "s", "eval_time_s": "s",
         "first_eval_time_s": "s", "job_wall_s": "s"}  # fmt: skip
NEEDS_CUDA = (
    "bench-gpu: skipped: needs CUDA (torch.cuda.is_available() is False here); "
    "run bench/gpu_check.sh on a GPU machine"
)


PARTS = ("sampling", "jobs", "profile", "first-eval", "dist")
HELD_LINE = re.compile(r"resident rows after epoch \d+: \d+ on \S+, hit rate ([\d.]+)")


def _args(argv: list[str]) -> tuple[int, int, int, tuple[str, ...]]:
    nodes, epochs, threads, parts = 2_449_029, 2, 8, PARTS
    for arg in argv:
        if arg.startswith("--epochs="):
            epochs = int(arg.split("=", 1)[1])
        elif arg.startswith("--threads="):
            threads = int(arg.split("=", 1)[1])
        elif arg.startswith("--only="):
            parts = tuple(arg.split("=", 1)[1].split(","))
            unknown = sorted(set(parts) - set(PARTS))
            if unknown:
                raise SystemExit(f"bench.gpu: --only={unknown[0]}: expected parts of {PARTS}")
        else:
            nodes = int(arg)
    return nodes, epochs, threads, parts


def _overrides(nodes: int, epochs: int) -> list[str]:
    return [
        "+experiment=products_homo", "cluster.num_nodes=1", f"dataset.num_nodes={nodes}",
        f"train.epochs={epochs}", "mlflow.enabled=false", f"output_dir={ROOT}",
        f"dataset.root={ROOT}/data", "loader.batch_size=1024",
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


def job_figures(output: str, samples: list[tuple[datetime, float]]) -> dict[str, float]:
    """The last epoch's figures, epoch 0's evaluation time and the GPU's busy fraction in the
    last training epoch, from a job's output and `nvidia-smi` samples."""
    lines = epochs_of(output)
    if not lines:
        raise ValueError("the job printed no epoch lines")
    when, last = lines[-1]
    out = {k: last[k] for k in JOB_KEYS}
    out["first_eval_time_s"] = lines[0][1]["eval_time_s"]
    train_end = when - timedelta(seconds=last["eval_time_s"])
    train_start = train_end - timedelta(seconds=last["epoch_time_s"])
    out["gpu_busy_frac"] = busy_fraction(samples, train_start, train_end)
    held = HELD_LINE.findall(output)  # a distributed trainer's rows on its GPU (part 5)
    if held:
        out["held_hit_rate"] = float(held[-1])
    return out


def run_job(extra: list[str], tag: str, nodes: int, epochs: int) -> dict[str, float] | None:
    """One GPU job; its figures (see `job_figures`) and wall time, or None (with its output's
    tail printed) when it fails or outlives `JOB_TIMEOUT_S`: the other jobs still run."""
    monitor = subprocess.Popen(
        ["nvidia-smi", "--query-gpu=timestamp,utilization.gpu", "--format=csv,noheader,nounits",
         "-i", "0", "-lms", "100"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "app", *_overrides(nodes, epochs), "train.device=cuda",
             f"hydra.run.dir={ROOT}/run-{tag}", *extra],
            capture_output=True, text=True, timeout=JOB_TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired as err:
        proc = subprocess.CompletedProcess(err.cmd, -1, _text(err.stdout), _text(err.stderr))
    wall = time.perf_counter() - start
    monitor.terminate()
    samples = _gpu_samples(monitor.communicate()[0])
    output = proc.stdout + proc.stderr
    try:
        if proc.returncode != 0:
            raise ValueError(f"exit {proc.returncode} after {wall:.0f} s")
        return {**job_figures(output, samples), "job_wall_s": wall}
    except ValueError as err:
        print(f"{BENCH:<22} {tag} job failed ({err}):\n{output[-3000:]}", flush=True)
        return None


def _text(out: str | bytes | None) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else out or ""


def seed_batches(num_nodes: int, batches: int, seed: int = 0) -> list[Any]:
    """`batches` random seed batches of 1024 node ids (the sampling part's inputs)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, num_nodes, (1024,), generator=gen) for _ in range(batches)]


def sampling_rate(sampler: Any, seeds: list[Any]) -> float:
    """Sampled edges/s of `sampler` over `seeds[1:]`, after a warm-up batch (`seeds[0]`)."""
    import torch

    sampler.sample(seeds[0], seed=0)
    torch.cuda.synchronize()
    start, edges = time.perf_counter(), 0
    for i, s in enumerate(seeds[1:]):
        edges += sampler.sample(s, seed=i + 1).row.numel()
    torch.cuda.synchronize()
    return edges / (time.perf_counter() - start)


def sampling_waits(sampler: Any, seeds: list[Any]) -> tuple[float, float]:
    """Host read-backs per seed batch of the torch sampler on the GPU (warmed up already):
    counted by `bench.readbacks.ReadBacks`, and by CUDA's own count of synchronizing calls."""
    from bench.readbacks import ReadBacks, host_waits

    run = functools.partial(_sample_all, sampler, seeds)
    with ReadBacks("cuda") as counter:
        run()
    waits = host_waits(run)
    return counter.total / len(seeds), waits / len(seeds)


def _sample_all(sampler: Any, seeds: list[Any]) -> None:
    for i, s in enumerate(seeds):
        sampler.sample(s, seed=i)


def profile_summary(events, wall_s: float, top: int = 6) -> dict:
    """From `torch.profiler`'s `key_averages()` of `wall_s` seconds of training: the share of
    the wall the GPU's kernels took (`gpu_busy_frac`), the host's waits for the device
    (synchronize calls and device-to-host copies, which stop the CPU from queueing ahead) and
    the `top` operations by their own GPU time, then by their own CPU time."""
    kernels = [e for e in events if e.device_type.name == "CUDA"]
    busy = sum(e.self_device_time_total for e in kernels) / 1e6 / max(wall_s, 1e-9)
    waits = sum(e.count for e in events if "Synchronize" in e.key or "DtoH" in e.key)
    by_gpu = sorted(events, key=lambda e: e.self_device_time_total, reverse=True)
    by_cpu = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)
    return {
        "gpu_busy_frac": busy,
        "host_waits": waits,
        "top_gpu": [
            (e.key, e.self_device_time_total / 1e6)
            for e in by_gpu[:top]
            if e.self_device_time_total
        ],
        "top_cpu": [(e.key, e.self_cpu_time_total / 1e6) for e in by_cpu[:top]],
    }


def profile_steps(data, extra: list[str], nodes: int, steps: int = PROFILE_STEPS) -> dict:
    """`steps` training steps of a GPU-sampled job built in this process (after 5 warm-up
    steps) under `torch.profiler`; `profile_summary` of them plus their wall time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from app.config import compose_config
    from app.task.local import LocalSource
    from app.task.node import NodeTask
    from app.train.loop import train_epoch

    cfg = compose_config(
        [*_overrides(nodes, 1), "train.device=cuda", "sampler.device=cuda", *extra]
    )
    task = NodeTask(cfg, LocalSource(cfg, data))
    args = (task.model, task.loaders["train"], task.optimizer, task.step)
    train_epoch(*args, max_steps=5)
    torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        train_epoch(*args, max_steps=steps)
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    del task
    torch.cuda.empty_cache()
    return {**profile_summary(prof.key_averages(), wall), "wall_s": wall}


def _profile(data: Any, scale: str, name: str, extra: list[str], nodes: int) -> None:
    """`profile_steps` under each of `ALLOCATOR`'s settings, in turn (the caching allocator
    reads its settings at each new segment, so the cache is emptied between them)."""

    for setting, conf in ALLOCATOR.items():
        _allocator(conf)
        prof = profile_steps(data, extra, nodes)
        tag = f"{scale}_{name}_profile" + ("" if setting == "default" else f"_{setting}")
        record(BENCH, f"{tag}_step_ms", prof["wall_s"] * 1e3 / PROFILE_STEPS, "ms")
        record(BENCH, f"{tag}_gpu_busy_frac", prof["gpu_busy_frac"], "")
        record(BENCH, f"{tag}_host_waits_per_step", prof["host_waits"] / PROFILE_STEPS, "")
        for kind in ("top_gpu", "top_cpu"):
            shown = ", ".join(f"{key} {secs * 1e3:.1f} ms" for key, secs in prof[kind])
            print(f"{BENCH:<22} {name} {setting} {kind} over {PROFILE_STEPS} steps: {shown}",
                  flush=True)  # fmt: skip
    _allocator(ALLOCATOR["default"])


def _allocator(conf: str) -> None:
    """Set the CUDA caching allocator's settings in this process (torch's private call, named
    `_accelerator_setAllocatorSettings` from 2.13 on)."""
    import torch

    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    (setter or torch.cuda.memory._set_allocator_settings)(conf)


def _guarded(what: str, step: Callable[..., None], *args: Any) -> None:
    """`step(*args)`, one part of the bench; a failure prints its last lines and the next
    part runs."""
    try:
        step(*args)
    except Exception:  # a device check gets one call: report the part and go on
        print(f"{BENCH:<22} {what} failed:\n{traceback.format_exc()[-3000:]}", flush=True)


def _sampling(data: Any, scale: str, name: str, fanout: list[int]) -> None:
    """The numba kernel (one thread) and the GPU sampler on the same seed batches (their
    edges/s), then the GPU sampler's read-backs per batch; each sampler built once."""
    import torch

    from app.sampler.neighbor import NeighborSampler

    seeds = seed_batches(data.num_nodes, 21)
    cpu = sampling_rate(NeighborSampler(data, fanout, seed=0), seeds)
    record(BENCH, f"{scale}_{name}_sampled_edges_per_s_cpu1", cpu, "edges/s")
    sampler = NeighborSampler(data, fanout, seed=0, device="cuda")
    gpu = sampling_rate(sampler, seeds)
    record(BENCH, f"{scale}_{name}_sampled_edges_per_s_gpu", gpu, "edges/s",
           "numba, 1 thread", gpu / cpu)  # fmt: skip
    readbacks, waits = sampling_waits(sampler, seed_batches(data.num_nodes, 5, seed=1))
    record(BENCH, f"{scale}_{name}_gpu_sampler_readbacks_per_batch", readbacks, "")
    record(BENCH, f"{scale}_{name}_gpu_sampler_host_waits_per_batch", waits, "")
    del sampler
    torch.cuda.empty_cache()


def _jobs(scale: str, name: str, extra: list[str], nodes: int, epochs: int, threads: int) -> None:
    """The GPU-sampled job in the trainer's thread (`inline`) and in `GPU_THREADS` threads on
    side streams, then the CPU-sampled one; each figure with its ratio to the CPU's."""
    inline = run_job([*extra, "sampler.device=cuda", "loader.num_workers=0"],
                     f"{name}-gpu-sampler-inline", nodes, epochs)  # fmt: skip
    gpu_fed = run_job([*extra, "sampler.device=cuda", f"loader.num_workers={GPU_THREADS}"],
                      f"{name}-gpu-sampler", nodes, epochs)  # fmt: skip
    cpu_fed = run_job([*extra, "sampler.device=cpu", f"loader.num_workers={threads}"],
                      f"{name}-cpu-sampler", nodes, epochs)  # fmt: skip
    _record_job(f"{scale}_{name}_gpu_sampler", gpu_fed, cpu_fed, "cpu sampler")
    _record_job(f"{scale}_{name}_cpu_sampler", cpu_fed, None, "")
    _record_job(f"{scale}_{name}_gpu_sampler_inline", inline, gpu_fed, "side streams")


def _dist(scale: str, nodes: int, epochs: int, threads: int) -> None:
    """Part 5: the 2-node [10, 5] job, rows held on the GPU against every row sent."""
    extra = ["cluster.num_nodes=2", f"loader.num_workers={max(1, threads // 2)}"]
    held = run_job(extra, "dist-rows-held", nodes, epochs)
    sent = run_job([*extra, "train.gpu_feature_bytes=0"], "dist-rows-sent", nodes, epochs)
    _record_job(f"{scale}_f10_5_dist_rows_held", held, sent, "rows sent")
    _record_job(f"{scale}_f10_5_dist_rows_sent", sent, None, "")


def _record_job(
    prefix: str, figures: dict[str, float] | None, ref: dict[str, float] | None, against: str
) -> None:
    """One record per figure of a job (none if it failed), with its ratio to the same figure
    of the `ref` job (`against` names it) where the figure has a unit."""
    for key, value in (figures or {}).items():
        base, unit = (ref or {}).get(key), UNITS.get(key, "")
        ratio = value / base if unit and base else None
        compared = None if base is None else f"{against} {base:.4g}"
        record(BENCH, f"{prefix}_{key}", value, unit, compared, ratio)


def _first_eval(name: str, extra: list[str], nodes: int, threads: int) -> None:
    """`bench.first_eval` of workload `name` on the GPU-sampled path, in a process of its own
    (it wraps `app.inference`'s functions to time them); its records join this bench's."""
    model = dict(a.split("=", 1) for a in extra if a.startswith("model."))
    layers, hidden = model.get("model.num_layers", "2"), model.get("model.hidden_channels", "128")
    cmd = [sys.executable, "-m", "bench.first_eval", str(nodes), "--device=cuda",
           "--sampler=cuda", f"--layers={layers}", f"--hidden={hidden}", f"--threads={threads}",
           f"--root={ROOT}"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=FIRST_EVAL_TIMEOUT_S)
    print("\n".join(line for line in proc.stdout.splitlines() if line.startswith("first_eval")))
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: exit {proc.returncode}:\n{proc.stderr[-3000:]}")


def main(argv: list[str] | None = None) -> None:
    import torch

    if not torch.cuda.is_available():
        print(NEEDS_CUDA, flush=True)
        return
    nodes, epochs, threads, parts = _args(sys.argv[1:] if argv is None else argv)
    from app.config import compose_config
    from app.dataset import load_dataset

    torch.set_num_threads(1)
    data = load_dataset(compose_config(_overrides(nodes, epochs)).dataset, 0)  # before timing
    scale = f"{nodes}n"
    for name, (fanout, _) in WORKLOADS.items():
        if "sampling" in parts:
            _guarded(f"{name} sampling", _sampling, data, scale, name, fanout)
    for name, (_, extra) in WORKLOADS.items():
        if "jobs" in parts:
            _guarded(f"{name} jobs", _jobs, scale, name, extra, nodes, epochs, threads)
    for name, (_, extra) in WORKLOADS.items():
        if "profile" in parts:
            _guarded(f"{name} profile", _profile, data, scale, name, extra, nodes)
    del data  # the breakdown's processes load their own
    for name, (_, extra) in WORKLOADS.items():
        if "first-eval" in parts:
            _guarded(f"{name} first evaluation", _first_eval, name, extra, nodes, threads)
    if "dist" in parts:
        _guarded("dist rows held", _dist, scale, nodes, epochs, threads)


if __name__ == "__main__":
    main()
