"""Interleaved A/B of the CPU-speed epoch: `bench.hosts`'s reference job with two code trees.

    python -m bench.epoch_ab OLD_TREE NEW_TREE [num_nodes] [steps] [rounds]   # 200000 10 2

Each tree (a checkout or an export of a commit, e.g. `git archive <commit> | tar x -C DIR`)
runs `bench.hosts`'s reference job as a process of its own, from its own directory and with
its own data and partition (written once per tree, untimed): 2 nodes on 127.0.0.1
(`cluster=local`), the real GraphSAGE 3x256 step, fan-out [15, 10, 5], batch 1024, sampling on
threads inside each trainer, window 2 (`sampler.concurrency`), two epochs capped at `steps`
batches. Rounds alternate the order (old, new, then new, old, ...), so both trees see the same
load. Per run: the second epoch's time and data wait (`result.json`), the job's CPU time (every
process of it, start-up and evaluation included: what a loaded machine changes least) and the
load average beside it; recorded: each tree's median, and new ÷ old as the median of the rounds'
own ratios (a round's two runs sit next to each other, so a load that drifts during the sitting
weighs on both).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import record
from bench.hosts import overrides

BENCH = "epoch_ab"
HOSTS = 2


def order(rounds: int) -> list[str]:
    """The trees' turns: old, new, then new, old, and so on (each round reversed)."""
    return [t for r in range(rounds) for t in (("old", "new") if r % 2 == 0 else ("new", "old"))]


def job(tree: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{tree}:{tree}/launchers"}
    cmd = [sys.executable, "-m", "app", *args]
    return subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)


def children_cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def run(tree: Path, out: Path, name: str, num_nodes: int, steps: int) -> dict[str, float]:
    """One reference job of `tree`; its last (second) epoch's metrics, the job's CPU time and
    the load beside."""
    args = [*overrides(out, num_nodes, steps, HOSTS), f"hydra.run.dir={out / name}"]
    cpu = children_cpu_s()
    proc = job(tree, args)
    if proc.returncode:
        raise SystemExit(f"{name} ({tree}) failed ({proc.returncode}): {proc.stderr[-2000:]}")
    res = json.loads((out / name / "result.json").read_text())
    return {**res, "job_cpu_s": children_cpu_s() - cpu, "load": os.getloadavg()[0]}


def paired_ratio(old: list[float], new: list[float]) -> float:
    """The median over rounds of new ÷ old (the i-th runs of each tree share round i)."""
    return statistics.median(n / o for o, n in zip(old, new, strict=True) if o)


def main(old: Path, new: Path, num_nodes: int, steps: int, rounds: int) -> None:
    trees = {"old": old.resolve(), "new": new.resolve()}
    got: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="distgnn-bench-epoch-ab-") as tmp:
        outs = {k: Path(tmp) / k for k in trees}
        for k, tree in trees.items():  # each tree writes its own data and partition
            proc = job(tree, ["task=partition", *overrides(outs[k], num_nodes, steps, HOSTS)])
            if proc.returncode:
                raise SystemExit(f"{k} partition failed: {proc.stderr[-2000:]}")
        for i, k in enumerate(order(rounds)):
            res = run(trees[k], outs[k], f"{k}-{i}", num_nodes, steps)
            got[k].append(res)
            print(f"run {i} {k}: epoch {res['epoch_time_s']:.2f} s, data wait "
                  f"{res['data_wait_frac']:.3f}, job CPU {res['job_cpu_s']:.1f} s, "
                  f"load {res['load']:.1f}", flush=True)  # fmt: skip
    for key, unit in (("epoch_time_s", "s"), ("data_wait_frac", "fraction"), ("job_cpu_s", "s")):
        old, new = ([r[key] for r in got[k]] for k in ("old", "new"))
        record(BENCH, f"{key}_old", statistics.median(old), unit)
        ratio = paired_ratio(old, new) if any(old) else None
        record(BENCH, f"{key}_new", statistics.median(new), unit, "old, median of rounds", ratio)


if __name__ == "__main__":
    argv = sys.argv[1:]
    if len(argv) < 2:
        raise SystemExit(__doc__.split("\n\n")[1])
    nums = [int(a) for a in argv[2:]] + [200_000, 10, 2][len(argv) - 2 :]
    main(Path(argv[0]), Path(argv[1]), *nums[:3])
