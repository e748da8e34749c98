"""The products-scale training job as a user runs it, with every process of it measured.

    python -m bench.products_job [--repeat=N] [num_nodes] [override ...]   # 2,449,029 nodes

Runs `python -m app +experiment=products_homo dataset.num_nodes=N train.epochs=1` (2 local
nodes, a sampler process per trainer, layer-wise evaluation). First, untimed, `task=partition`
generates the graph (cached under `data/`, as for any job) and partitions it (under
`outputs/bench/products/`); then the training job is measured. While it runs, a monitor polls
every process of the job (`/proc/<pid>/stat`, every 0.2 s): user and kernel CPU seconds,
minor page faults and RSS, per process (named from the DISTGNN_* variables the launcher sets),
and every two seconds the proportional set size (PSS: a page shared by k processes counts 1/k in
each — the partition's memory-mapped files are mapped by both processes of a node).
The job's own figures come from its `result.json`: `epoch_time_s`, `eval_time_s`,
`data_wait_frac`, accuracies. With a `train.epochs=K` override, the figures are the last
epoch's and its evaluation's (the first epoch pays one-time costs; later evaluations reuse
their plan).

The phases are cut at the job's clock: the training epoch is the `epoch_time_s` seconds before
evaluation starts, and evaluation is the `eval_time_s` seconds before the epoch's metrics line
appears in rank 0's log, so the CPU, faults and memory of each phase are their own. Records:
`epoch_time_s`, `data_wait_frac`, `kernel_cpu_frac_train` (kernel ÷ all CPU of the job's
processes during the epoch), `minor_faults_per_batch` and `sampler_cpu_s_per_batch` (all
processes, per batch of either rank), `eval_time_s` (ratio: ÷ the epoch), `peak_node_gb_eval`
(trainer + sampler PSS of one node; ratio: ÷ the training peak; the RSS sums, which count the
shared file pages twice, are in the JSON as `peak_node_rss_gb_*`), `test_acc`.

With `--repeat=N` the job runs N times, one after the other, and every record is the median
over the runs (ratios: the median of the per-run ratios); the printed JSON has every run.
`make bench-products` runs it three times: one run spreads by about ±20 % on this machine.

Then the job runs N more times with the experiment's own `train.epochs` (5: the run a user
gets), evaluating after every epoch: `last_eval_time_s`, an evaluation in steady state (its
plan made, its buffers kept by `train.eval_keep_buffers`; ratio: ÷ its epoch),
`last_epoch_peak_node_gb` (the last epoch's training peak, which holds those buffers; ratio: ÷
the first run's), and `job_eval_time_s`: every evaluation of the job together (ratio: ÷ every
epoch together), from the per-epoch metrics in rank 0's log.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from omegaconf import OmegaConf

from bench.common import record

BENCH = "products_job"
NODES = 2_449_029
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
POLL_S = 0.2
PSS_EVERY = 10  # polls between PSS reads (smaps_rollup walks the page tables: ~30 ms a process)


def _stat(pid: int) -> tuple[float, float, int, int] | None:
    """(user s, kernel s, minor faults, RSS bytes) of `pid`, None once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "
    minflt, utime, stime, rss = int(fields[7]), int(fields[11]), int(fields[12]), int(fields[21])
    return utime / TICK, stime / TICK, minflt, rss * PAGE


def _pss(pid: int) -> int | None:
    """Proportional set size of `pid` in bytes, None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _name(pid: int) -> str | None:
    """The worker name (`trainer0-0`, `sampler0-0-0`, ...) of a job child, from the
    DISTGNN_* variables the launcher gave it; None for any other process."""
    from app.runtime import Runtime

    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    env = dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)
    try:
        return Runtime.from_env(env).name
    except RuntimeError:  # not started by the launcher
        return None


def _children(pid: int) -> list[int]:
    """Every descendant of `pid`."""
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


class Monitor(threading.Thread):
    """Polls the job's processes; `samples`: (time, {name: (user, sys, minflt, rss, pss)}),
    pss: the last PSS read (every `PSS_EVERY` polls)."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.samples, self.stop = root, [], threading.Event()
        self.names: dict[int, str] = {}
        self.pss: dict[int, int] = {}

    def run(self) -> None:
        for poll in itertools.count():
            if self.stop.is_set():
                return
            now, row = time.monotonic(), {}
            for pid in _children(self.root):
                if pid not in self.names:
                    name = _name(pid)
                    if name is None:
                        continue
                    self.names[pid] = name
                if poll % PSS_EVERY == 0:
                    self.pss[pid] = _pss(pid) or self.pss.get(pid, 0)
                got = _stat(pid)
                if got is not None:
                    row[self.names[pid]] = (*got, self.pss.get(pid, 0))
            self.samples.append((now, row))
            time.sleep(POLL_S)

    def at(self, t: float) -> dict[str, tuple]:
        """The last sample at or before `t` (cumulative counters)."""
        best = {}
        for when, row in self.samples:
            if when > t:
                break
            best = row
        return best

    def between(self, t0: float, t1: float) -> dict[str, float]:
        """Counter deltas over [t0, t1] per role kind, and the peak PSS (and RSS) per node."""
        a, b = self.at(t0), self.at(t1)
        out = {"user_s": 0.0, "sys_s": 0.0, "minflt": 0.0}
        for name, (u, s, f, *_) in b.items():
            u0, s0, f0, *_ = a.get(name, (0.0, 0.0, 0))
            kind = "trainer" if name.startswith("trainer") else "sampler"
            for key, value in (("user_s", u - u0), ("sys_s", s - s0), ("minflt", f - f0)):
                out[key] += value
                out[f"{kind}_{key}"] = out.get(f"{kind}_{key}", 0.0) + value
        for key, field in (("peak_node_rss_gb", -2), ("peak_node_gb", -1)):
            peak: dict[str, float] = {}
            for when, row in self.samples:
                if t0 <= when <= t1:
                    per_node: dict[str, int] = {}
                    for name, values in row.items():
                        node = name.removeprefix("trainer").removeprefix("sampler").split("-")[0]
                        per_node[node] = per_node.get(node, 0) + values[field]
                    for node, size in per_node.items():
                        peak[node] = max(peak.get(node, 0), size)
            out[key] = max(peak.values(), default=0) / 2**30
        return out


def _job(out: Path, nodes: int, extra: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "app", "+experiment=products_homo", f"dataset.num_nodes={nodes}",
        "train.epochs=1", f"output_dir={out}", *extra,
    ]  # fmt: skip


def _epochs(extra: list[str]) -> int:
    """The job's epoch count: 1, or the last `train.epochs=` override (Hydra's last wins)."""
    given = [o.split("=", 1)[1] for o in extra if o.startswith("train.epochs=")]
    return int(given[-1]) if given else 1


def _epoch_metrics(log: Path) -> list[dict[str, float]]:
    """Every epoch's metrics line of rank 0's `log` (`epoch N: key=value, ...`), in order."""
    lines = re.findall(r"distgnn\.train: epoch \d+: (\w+=.*)", log.read_text(errors="replace"))
    return [
        {k: float(v) for k, v in (kv.split("=", 1) for kv in line.split(", "))} for line in lines
    ]


def _log_line_time(log: Path, needle: str, proc: subprocess.Popen) -> float:
    """Poll `log` until `needle` appears (the monotonic time it was seen)."""
    while True:
        if log.exists() and needle in log.read_text(errors="replace"):
            return time.monotonic()
        if proc.poll() is not None:
            raise RuntimeError(f"job ended (exit {proc.returncode}) before {needle!r} in {log}")
        time.sleep(POLL_S / 2)


OUT = Path("outputs/bench/products")
EXPERIMENT = Path("conf/experiment/products_homo.yaml")


def prepare(nodes: int, extra: list[str]) -> None:
    """Cache the data and partition (one untimed run of the partition task)."""
    subprocess.run([*_job(OUT, nodes, extra), "task=partition"], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip


def measure(nodes: int, extra: list[str]) -> dict[str, Any]:
    """One training job (data and partition cached by `prepare`), measured per process."""
    runs_before = set((OUT / "runs").glob("*"))
    proc = subprocess.Popen(_job(OUT, nodes, extra), stdout=subprocess.DEVNULL)
    monitor = Monitor(proc.pid)
    monitor.start()
    while not (new := set((OUT / "runs").glob("*")) - runs_before):
        time.sleep(POLL_S)
    job = new.pop()
    last = f"distgnn.train: epoch {_epochs(extra) - 1}:"  # the measured epoch: the last one
    ended = _log_line_time(job / "logs" / "trainer0-0.log", last, proc)
    if proc.wait() != 0:
        raise RuntimeError(f"job failed (exit {proc.returncode}): see {job}/logs")
    monitor.stop.set()
    monitor.join()
    result = json.loads((job / "result.json").read_text())
    epochs = _epoch_metrics(job / "logs" / "trainer0-0.log")
    eval_start = ended - result["eval_time_s"]
    train = monitor.between(eval_start - result["epoch_time_s"], eval_start)
    evaluation = monitor.between(eval_start, ended)
    cpu = train["user_s"] + train["sys_s"]
    return {
        **{k: result[k] for k in ("epoch_time_s", "eval_time_s", "data_wait_frac", "steps")},
        **{k: result[k] for k in ("val_acc", "test_acc", "cache_hit_rate")},
        "kernel_cpu_frac_train": train["sys_s"] / cpu,
        "minor_faults_per_batch": train["minflt"] / result["steps"],
        "sampler_cpu_s_per_batch": (train["sampler_user_s"] + train["sampler_sys_s"])
        / result["steps"],
        "peak_node_gb_train": train["peak_node_gb"],
        "peak_node_gb_eval": evaluation["peak_node_gb"],
        "peak_node_rss_gb_train": train["peak_node_rss_gb"],
        "peak_node_rss_gb_eval": evaluation["peak_node_rss_gb"],
        "eval_cpu_s": evaluation["user_s"] + evaluation["sys_s"],
        "job_epoch_time_s": sum(e["epoch_time_s"] for e in epochs),
        "job_eval_time_s": sum(e.get("eval_time_s", 0.0) for e in epochs),
        "train_by_role": {k: v for k, v in train.items() if k.startswith(("trainer", "sampler"))},
        "eval_by_role": {
            k: v for k, v in evaluation.items() if k.startswith(("trainer", "sampler"))
        },
        "job": str(job),
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every figure over `runs` (and of the per-run ratios the records give):
    one run of this job spreads by about +-20 % on a shared 2-core machine."""
    out: dict[str, Any] = {
        k: statistics.median(r[k] for r in runs)
        for k, v in runs[0].items()
        if isinstance(v, (int, float))
    }
    out["eval_over_epoch"] = statistics.median(r["eval_time_s"] / r["epoch_time_s"] for r in runs)
    out["peak_eval_over_train"] = statistics.median(
        r["peak_node_gb_eval"] / r["peak_node_gb_train"] for r in runs
    )
    out["job_eval_over_train"] = statistics.median(
        r["job_eval_time_s"] / r["job_epoch_time_s"] for r in runs
    )
    out["runs"] = len(runs)
    return out


def _arguments(argv: list[str]) -> tuple[int, int, list[str]]:
    """(repeat, num_nodes, overrides) from `[--repeat=N] [num_nodes] [override ...]`."""
    repeat = 1
    if argv and argv[0].startswith("--repeat="):
        repeat = int(argv.pop(0).split("=", 1)[1])
    if repeat < 1:
        raise SystemExit(f"--repeat={repeat}: need at least one run")
    nodes = int(argv.pop(0)) if argv and argv[0].isdigit() else NODES
    return repeat, nodes, argv


def main() -> None:
    repeat, nodes, extra = _arguments(sys.argv[1:])
    prepare(nodes, extra)
    runs = [measure(nodes, extra) for _ in range(repeat)]
    m = summarize(runs)
    print(json.dumps({"median": m, "runs": runs}, indent=1), flush=True)
    scale = f"{nodes:,} nodes, median of {repeat}"
    record(BENCH, "epoch_time_s", m["epoch_time_s"], "s")
    record(BENCH, "data_wait_frac", m["data_wait_frac"], "frac")
    record(BENCH, "kernel_cpu_frac_train", m["kernel_cpu_frac_train"], "frac")
    record(BENCH, "minor_faults_per_batch", m["minor_faults_per_batch"], "faults")
    record(BENCH, "sampler_cpu_s_per_batch", m["sampler_cpu_s_per_batch"], "s")
    record(BENCH, "eval_time_s", m["eval_time_s"], "s", "training epoch", m["eval_over_epoch"])
    record(BENCH, "peak_node_gb_eval", m["peak_node_gb_eval"], "GiB", "training peak",
           m["peak_eval_over_train"])  # fmt: skip
    record(BENCH, "test_acc", m["test_acc"], "acc", scale)
    epochs = OmegaConf.load(EXPERIMENT).train.epochs
    later = summarize([measure(nodes, [*extra, f"train.epochs={epochs}"]) for _ in range(repeat)])
    print(json.dumps({f"{epochs}_epochs_median": later}, indent=1), flush=True)
    record(BENCH, "last_eval_time_s", later["eval_time_s"], "s", "its training epoch",
           later["eval_over_epoch"])  # fmt: skip
    record(BENCH, "last_epoch_peak_node_gb", later["peak_node_gb_train"], "GiB",
           "1-epoch job's training peak", later["peak_node_gb_train"] / m["peak_node_gb_train"])  # fmt: skip
    record(BENCH, "job_eval_time_s", later["job_eval_time_s"], "s",
           f"the job's {epochs} training epochs", later["job_eval_over_train"])  # fmt: skip


if __name__ == "__main__":
    main()
