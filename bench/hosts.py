"""The cost of the link: the e2e job across 2 to 4 testbed hosts, unshaped and shaped.

    python -m bench.hosts [num_nodes] [steps] [hosts,...] [rates,...]
    # default: 200000 nodes, 10 steps, hosts 2,3,4, rates none,25gbit,10gbit,1gbit,gpuspeed

Each host is a network namespace of `app.testbed` (own PID namespace and /dev/shm) on a
bridge, its egress shaped with `tbf`; one launcher per host, started from SLURM's variables
(`cluster=env`). The job is `bench.e2e`'s (synthetic products graph, fan-out [15,10,5], batch
1024, GraphSAGE 3x256, sampling on threads inside each trainer), two epochs capped at `steps`
batches, figures from the second. Side by side in the same run: the same job with the same
number of nodes on 127.0.0.1 (`cluster=local`, no link at all), the reference of every ratio.

Per (hosts, rate): epoch time and its ratio to the loopback run, data wait, and where the
bytes go: each host's bytes on the wire per batch (interface counters) next to the job's own
counts of remote feature bytes and hop (sampling request/response) bytes per batch.

Projection: from the bytes on the wire per batch measured at H hosts, a host's bytes per batch
on N machines is scaled by the remote share of its neighbourhoods, (N-1)/N over (H-1)/H (an
even cut; METIS does better), and the time those bytes take on a link of R Gbit/s is set
against the measured loopback step time: `wire_ms = bytes * 8 / R`, `bound = 1 + wire / step`
(no overlap of transfer and compute; an upper bound).

GPU-speed regime (rate `gpuspeed`): what the link costs when a step takes what it takes on a
GPU. The trainer's compute is replaced by a fixed step of `--step-s` seconds of sleep
(`bench.gpu_step`: the model's real parameters, so DDP all-reduces the real gradients), and
the link is shaped to `10 Gbit/s x GPU step / step-s` (GPU step `--gpu-step-ms`, default
docs/benchmarks.md's H200 figure): the ratio of link time to step time is the GPU machine's,
time dilated by `step-s / GPU step`. Per batch-window depth (`sampler.concurrency`, `--depths`):
the same job on the unshaped testbed link, then shaped, three epochs each; records
`*gpuspeed*`: the middle epoch's time ÷ unshaped and data wait (its window takes the first
batches the epoch before sampled and samples the next epoch's: a steady state, as in a long
run), link time per batch against the step, and the bytes per batch per host split into
remote features, hop requests (ids and replies), gradients (the model's parameter bytes times
a ring all-reduce's 2(H-1)/H, computed) and framing (the interface counters minus the three).

    python -m bench.hosts [num_nodes] [steps] [hosts,...] [rates,...] [--step-s S]
        [--gpu-step-ms MS] [--depths 2,4] [--feature-dtype float16] [--feature-wire-dtype ...]
        [--hot-cache-bytes B] [--ddp-comm-hook fp16]

`--feature-dtype float16` partitions and trains a float16 store (`dataset.feature_dtype`):
rows on the wire and in the hot cache at 2 bytes per feature, without a conversion.

Needs root and network namespaces; elsewhere it prints why and records nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app.config import compose_config
from app.model.registry import build_model
from app.testbed.net import Testbed, TestbedError, check_support, parse_rate
from bench.common import record
from bench.e2e import job_overrides
from bench.gpu_step import STEP_ENV

BENCH = "hosts"
BASE_PORT = 29500
MODEL = ["sampler.num_neighbors=[15,10,5]", "model.num_layers=3", "model.hidden_channels=256"]
DEPTH = 2  # sampler.concurrency of today's records
PROJECT_NODES = (2, 4, 8, 16)
PROJECT_GBIT = (10, 25, 100)
REPO = Path(__file__).resolve().parents[1]
GPUSPEED = "gpuspeed"
GPU_STEP_MS = 5.8  # docs/benchmarks.md: products on one H200, 1.394 s for 240 steps
GPU_LINK_BITS = 10 * 10**9  # the link the regime emulates: 10 Gbit/s
FIXED_STEP = "model.name=bench.gpu_step:build"


def overrides(
    out: Path, num_nodes: int, steps: int, hosts: int, depth: int = DEPTH, extra: tuple = ()
) -> list[str]:
    return [*job_overrides(out, num_nodes, steps, hosts, 0), *MODEL,
            f"sampler.concurrency={depth}", *extra]  # fmt: skip


def app_cmd(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "app", *args]


def run_local(
    out: Path, num_nodes: int, steps: int, hosts: int, extra: tuple = ()
) -> dict[str, float]:
    """The job on 127.0.0.1 (`cluster=local`): the reference."""
    job = out / f"local-{hosts}"
    args = [*overrides(out, num_nodes, steps, hosts, extra=extra), f"hydra.run.dir={job}"]
    subprocess.run(app_cmd(args), cwd=REPO, check=True, capture_output=True)
    return json.loads((job / "result.json").read_text())


def run_hosts(
    tb: Testbed, out: Path, job_args: list[str], tag: str, env_extra: dict[str, str] | None = None
) -> dict[str, float]:
    """The job `job_args` across the testbed's hosts, one launcher per host from SLURM's
    variables (`env_extra` added to their environment)."""
    job = out / f"hosts-{tag}"
    args = [*job_args, "cluster=env", "cluster.allow_remote=true",
            f"cluster.master_port={BASE_PORT}", f"hydra.run.dir={job}"]  # fmt: skip
    procs = []
    for i in range(tb.hosts):
        env = {**os.environ, **(env_extra or {}), "SLURM_NODEID": str(i),
               "SLURM_NNODES": str(tb.hosts), "SLURM_LAUNCH_NODE_IPADDR": tb.addr(0),
               "SLURM_JOB_ID": f"bench-{tag}"}  # fmt: skip
        log = open(out / f"hosts-{tag}-node{i}.log", "w")  # noqa: SIM115 (closed below)
        procs.append((subprocess.Popen(tb.host_cmd(i, app_cmd(args)), cwd=REPO, env=env,
                                       stdout=log, stderr=subprocess.STDOUT), log))  # fmt: skip
    codes = []
    for proc, log in procs:
        codes.append(proc.wait())
        log.close()
    if any(codes):
        raise RuntimeError(f"hosts-{tag}: exit codes {codes}; logs in {out}")
    return json.loads((job / "result.json").read_text())


def report(hosts: int, rate: str, res: dict[str, float], ref: dict[str, float]) -> None:
    tag = f"{hosts}hosts_{rate}"
    record(BENCH, f"epoch_time_{tag}_s", res["epoch_time_s"], "s", f"{hosts} nodes on loopback",
           res["epoch_time_s"] / ref["epoch_time_s"])  # fmt: skip
    record(BENCH, f"data_wait_frac_{tag}", res["data_wait_frac"], "fraction")
    sent = max(res[f"wire_sent_bytes_per_batch_h{i}"] for i in range(hosts))
    record(BENCH, f"wire_sent_bytes_per_batch_max_host_{tag}", sent, "bytes")
    record(BENCH, f"feature_bytes_per_batch_{tag}", res["remote_feature_bytes_per_batch"], "bytes")
    record(BENCH, f"hop_bytes_per_batch_{tag}", res["hop_bytes_per_batch"], "bytes")


def projection(hosts: int, wire_bytes: float, step_s: float) -> None:
    """The table of the module docstring, printed and recorded."""
    print(f"\nprojection from {hosts} hosts: {wire_bytes:,.0f} B/batch/host, step {step_s:.3f} s")
    print(f"{'machines':>8} " + " ".join(f"{g:>4} Gbit/s: ms, bound" for g in PROJECT_GBIT))
    share = (hosts - 1) / hosts
    for n in PROJECT_NODES:
        b = wire_bytes * ((n - 1) / n) / share
        cells = []
        for g in PROJECT_GBIT:
            wire_s = b * 8 / (g * 1e9)
            cells.append(f"{wire_s * 1e3:>12.2f}, {1 + wire_s / step_s:>5.2f}x")
            record(BENCH, f"projected_wire_ms_{n}machines_{g}gbit_from{hosts}", wire_s * 1e3, "ms")
        print(f"{n:>8} " + " ".join(cells))


def gradient_bytes(job_args: list[str]) -> int:
    """Bytes DDP all-reduces per step: every trainable parameter's gradient (its buckets hold
    them all, float32), of the model the job's config builds."""
    cfg = compose_config(job_args)
    d = cfg.dataset
    model = build_model(cfg.model, d.num_features, d.num_classes)
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def gpuspeed_rate(step_s: float, gpu_step_ms: float) -> str:
    """The `tbf` rate that gives a link of GPU_LINK_BITS the same time per step at `step_s`
    as at the GPU's step (time dilated by step_s / GPU step)."""
    return f"{int(GPU_LINK_BITS * gpu_step_ms / 1e3 / step_s / 1e3)}kbit"


EPOCH_LINE = re.compile(r"epoch \d+: (loss=.*)$")
PER_BATCH = ("wire_bytes_per_batch", "remote_feature_bytes_per_batch", "hop_bytes_per_batch")


def epoch_lines(job_dir: Path) -> list[dict[str, str]]:
    """Every epoch's metrics as rank 0 logged them (`app.train.loop`'s `epoch N: k=v, ...`)."""
    epochs = []
    for line in (job_dir / "logs" / "trainer0-0.log").read_text().splitlines():
        if m := EPOCH_LINE.search(line):
            epochs.append(dict(kv.split("=", 1) for kv in m.group(1).split(", ")))
    return epochs


def job_bytes(job_dir: Path) -> dict[str, float]:
    """The job's bytes per batch over all its epochs: a window that spans epochs samples the
    next epoch's first batches in the epoch before, so one epoch's traffic is not its own
    batches' (the job's is, but for the first batches prefetched before epoch 0's counters
    start: a few hundred ms of traffic)."""
    epochs = epoch_lines(job_dir)
    steps = sum(float(e["steps"]) for e in epochs)
    return {k: sum(float(e[k]) * float(e["steps"]) for e in epochs) / steps for k in PER_BATCH}


def report_gpuspeed(
    hosts: int, depth: int, res: dict[str, float], base: dict[str, float], grad_bytes: int,
    rate: str, opts: argparse.Namespace,
) -> None:  # fmt: skip
    """The records of one depth of the regime (module docstring); `res` has `job_bytes`."""
    tag = f"{hosts}hosts_{GPUSPEED}_d{depth}{variant_tag(opts)}"
    record(BENCH, f"epoch_time_{tag}_unshaped_s", base["epoch_time_s"], "s")
    record(BENCH, f"epoch_time_{tag}_s", res["epoch_time_s"], "s",
           "same job, unshaped testbed link", res["epoch_time_s"] / base["epoch_time_s"])  # fmt: skip
    record(BENCH, f"data_wait_frac_{tag}_unshaped", base["data_wait_frac"], "fraction")
    record(BENCH, f"data_wait_frac_{tag}", res["data_wait_frac"], "fraction")
    wire = res["job_wire_bytes_per_batch"]  # every host's sent bytes per batch, averaged
    features, hops = res["job_remote_feature_bytes_per_batch"], res["job_hop_bytes_per_batch"]
    # what a ring all-reduce sends per host; the fp16 hook halves the float32 gradients
    grads = grad_bytes * 2 * (hosts - 1) / hosts / (2 if opts.ddp_comm_hook == "fp16" else 1)
    for part, value in (("wire", wire), ("feature", features), ("hop", hops),
                        ("gradient", grads), ("framing", wire - features - hops - grads)):  # fmt: skip
        record(BENCH, f"{part}_bytes_per_batch_{tag}", value, "bytes")
    link_s = wire * 8 / (parse_rate(rate) or 1)
    record(BENCH, f"link_time_per_batch_{tag}_s", link_s, "s", f"the {opts.step_s:g} s step",
           link_s / opts.step_s)  # fmt: skip


def variant_tag(opts: argparse.Namespace) -> str:
    """The records' suffix naming what differs from the defaults (store and wire dtypes,
    caches, hook)."""
    tag = "" if opts.feature_dtype == "float32" else "_store16"
    tag += "" if opts.feature_wire_dtype == "store" else f"_wire{opts.feature_wire_dtype}"
    tag += f"_hot{opts.hot_cache_bytes}" if opts.hot_cache_bytes else ""
    return tag + ("" if opts.ddp_comm_hook == "none" else f"_grad{opts.ddp_comm_hook}")


def gpuspeed(
    tb: Testbed, out: Path, base_args: list[str], hosts: int, opts: argparse.Namespace
) -> None:
    """Per depth: the fixed-step job unshaped, then at the emulated rate (module docstring)."""
    rate = gpuspeed_rate(opts.step_s, opts.gpu_step_ms)
    grad_bytes = gradient_bytes(base_args)
    env = {STEP_ENV: str(opts.step_s)}
    print(f"  {GPUSPEED}: step {opts.step_s:g} s (GPU {opts.gpu_step_ms:g} ms), link {rate}")
    for depth in opts.depths:
        args = [*base_args, f"sampler.concurrency={depth}", FIXED_STEP, "train.epochs=3",
                f"sampler.feature_wire_dtype={opts.feature_wire_dtype}",
                f"sampler.hot_cache_bytes={opts.hot_cache_bytes}",
                f"train.ddp_comm_hook={opts.ddp_comm_hook}"]  # fmt: skip
        runs = {}
        for shaped in (None, rate):
            tb.up(shaped)
            tag = f"{hosts}-{GPUSPEED}-{shaped}-d{depth}{variant_tag(opts)}"
            run_hosts(tb, out, args, tag, env)
            middle = epoch_lines(out / f"hosts-{tag}")[1]  # both of its boundaries span
            runs[shaped] = {k: float(middle[k]) for k in ("epoch_time_s", "data_wait_frac")}
            spread = job_bytes(out / f"hosts-{tag}")
            runs[shaped].update({f"job_{k}": v for k, v in spread.items()})
        report_gpuspeed(hosts, depth, runs[rate], runs[None], grad_bytes, rate, opts)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.hosts", description=__doc__.split("\n")[0])
    p.add_argument("num_nodes", nargs="?", type=int, default=200_000)
    p.add_argument("steps", nargs="?", type=int, default=10)
    p.add_argument("hosts", nargs="?", default="2,3,4", help="host counts, e.g. 2,4")
    p.add_argument("rates", nargs="?", default=f"none,25gbit,10gbit,1gbit,{GPUSPEED}")
    p.add_argument("--step-s", type=float, default=1.0, help="the fixed step of gpuspeed (s)")
    p.add_argument("--gpu-step-ms", type=float, default=GPU_STEP_MS, help="the GPU's step")
    p.add_argument("--depths", default="2,4", help="gpuspeed: sampler.concurrency values")
    p.add_argument("--feature-wire-dtype", default="store", choices=("store", "float16", "bfloat16"),
                   help="gpuspeed: sampler.feature_wire_dtype (records tagged _wire<dtype>)")  # fmt: skip
    p.add_argument("--feature-dtype", default="float32", choices=("float32", "float16"),
                   help="dataset.feature_dtype of every job (gpuspeed records tagged _store16)")  # fmt: skip
    p.add_argument("--hot-cache-bytes", type=int, default=0,
                   help="gpuspeed: sampler.hot_cache_bytes (records tagged _hot<bytes>)")  # fmt: skip
    p.add_argument("--ddp-comm-hook", default="none", choices=("none", "fp16"),
                   help="gpuspeed: train.ddp_comm_hook (records tagged _grad<hook>)")  # fmt: skip
    opts = p.parse_args(argv)
    opts.hosts = [int(h) for h in opts.hosts.split(",")]
    opts.rates = opts.rates.split(",")
    opts.depths = [int(d) for d in opts.depths.split(",")]
    if (
        opts.step_s <= 0
        or opts.gpu_step_ms <= 0
        or min(opts.depths) < 1
        or opts.hot_cache_bytes < 0
    ):
        p.error(f"--step-s={opts.step_s}, --gpu-step-ms={opts.gpu_step_ms}, --depths="
                f"{opts.depths}, --hot-cache-bytes={opts.hot_cache_bytes}: need positive times, "
                "depths >= 1 and a cache of >= 0 bytes")  # fmt: skip
    return opts


def main(argv: list[str] | None = None) -> None:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    num_nodes, steps, rates = opts.num_nodes, opts.steps, opts.rates
    shaped = [r for r in rates if r != GPUSPEED]
    try:
        check_support()
        [parse_rate(r) for r in shaped]
    except TestbedError as err:
        print(f"bench.hosts skipped: {err}")
        return
    out = Path(os.environ.get("DISTGNN_BENCH_HOSTS_DIR") or tempfile.mkdtemp(prefix="bench-hosts-"))
    store = (f"dataset.feature_dtype={opts.feature_dtype}",)
    for hosts in opts.hosts:
        subprocess.run(app_cmd(["task=partition", *overrides(out, num_nodes, steps, hosts, extra=store)]),
                       cwd=REPO, check=True, capture_output=True)  # fmt: skip
        tb = Testbed(hosts=hosts, prefix="dgbench")
        try:
            if shaped:
                today(tb, out, opts, hosts, shaped)
            if GPUSPEED in rates:
                jobs = job_overrides(out, num_nodes, steps, hosts, 0)
                base = [*[a for a in jobs if not a.startswith("train.epochs=")], *MODEL, *store]
                gpuspeed(tb, out, base, hosts, opts)
        finally:
            tb.down()


def today(tb: Testbed, out: Path, opts: argparse.Namespace, hosts: int, rates: list[str]) -> None:
    """Today's records: the loopback reference, then the job at each of `rates`."""
    num_nodes, steps = opts.num_nodes, opts.steps
    store = (f"dataset.feature_dtype={opts.feature_dtype}",)
    ref = run_local(out, num_nodes, steps, hosts, store)
    record(BENCH, f"epoch_time_{hosts}nodes_loopback_s", ref["epoch_time_s"], "s")
    for rate in rates:
        tb.up(rate)
        start = time.perf_counter()
        job_args = overrides(out, num_nodes, steps, hosts, extra=store)
        res = run_hosts(tb, out, job_args, f"{hosts}-{rate}")
        print(f"  {hosts} hosts at {rate}: job {time.perf_counter() - start:.0f} s")
        report(hosts, rate, res, ref)
        if rate == rates[0]:
            wire = max(res[f"wire_sent_bytes_per_batch_h{i}"] for i in range(hosts))
            step_s = ref["epoch_time_s"] / (ref["steps"] / hosts)
            projection(hosts, wire, step_s)


if __name__ == "__main__":
    main()
