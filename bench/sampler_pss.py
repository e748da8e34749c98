"""A sampler process's fixed memory (issue 38: idle sampler PSS ≤ 200 MB), source trees side by side.

Two figures per source tree, runs interleaved (A B A B ...) so that both see the same machine
state (PSS splits a shared page between every process mapping it, other users' processes of
the same virtualenv included):

* imports: PSS and RSS of a process that has imported what a sampler process imports at start
  (`app.launch.worker`, `app.config`, `app.distributed.workers`, `app.distributed.server`) —
  nothing else runs.
* job: a real 2-node job (`+experiment=smoke cluster.num_nodes=2 loader.num_workers=1`, 2000
  nodes: the partition is a few hundred KB) polled every `POLL_S`; a sampler's idle PSS is the
  median of its readings over the last half of its life (it serves a batch in milliseconds and
  waits the rest), its peak the largest reading.

`python -m bench.sampler_pss [TREE ...]` (default: this tree); each TREE is a checkout whose
`app` is put first on PYTHONPATH (e.g. `git worktree add /tmp/base <commit>` for a baseline).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from bench.products_job import _name, _pss

ROOT = Path(__file__).resolve().parents[1]
POLL_S = 0.3
ROUNDS = int(os.environ.get("DISTGNN_BENCH_ROUNDS", 2))
JOB = ["+experiment=smoke", "cluster.num_nodes=2", "loader.num_workers=1", "train.epochs=2"]
IMPORTS = """
import app.launch.worker, app.config, app.distributed.workers
from app.distributed import server
rollup = open("/proc/self/smaps_rollup").read().splitlines()
print(*(int(l.split()[1]) * 1024 for l in rollup if l.startswith(("Rss:", "Pss:"))))
"""


def _env(tree: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=f"{tree}:{tree / 'launchers'}")


def imports(tree: Path) -> tuple[int, int]:
    """(RSS, PSS) bytes of a process holding a sampler's start-up imports."""
    out = subprocess.run([sys.executable, "-c", IMPORTS], cwd=tree, env=_env(tree),
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    rss, pss = (int(v) for v in out.split())
    return rss, pss


def job(tree: Path) -> dict[str, tuple[int, int]]:
    """{sampler name: (idle PSS, peak PSS)} bytes of a 2-node smoke job run from `tree`."""
    cmd = [sys.executable, "-m", "app", *JOB]
    proc = subprocess.Popen(cmd, cwd=tree, env=_env(tree), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    trace: dict[str, list[int]] = {}
    while proc.poll() is None:
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            break
        for child in children:
            name = _name(child.pid)
            pss = _pss(child.pid) if name and name.startswith("sampler") else None
            if name and pss:
                trace.setdefault(name, []).append(pss)
        time.sleep(POLL_S)
    _, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"job from {tree} failed ({proc.returncode}): {err.strip()[-500:]}")
    return {n: (int(statistics.median(v[len(v) // 2 :])), max(v)) for n, v in sorted(trace.items())}


def main() -> None:
    trees = [Path(t).resolve() for t in sys.argv[1:]] or [ROOT]
    mib = 2**20
    for r in range(ROUNDS):
        for tree in trees:
            load = os.getloadavg()[0]
            rss, pss = imports(tree)
            print(f"round {r} {tree}: load {load:.1f}; imports RSS {rss / mib:.0f} MiB, "
                  f"PSS {pss / mib:.0f} MiB", flush=True)  # fmt: skip
            for name, (idle, peak) in job(tree).items():
                print(f"  {name}: idle PSS {idle / mib:.0f} MiB, peak {peak / mib:.0f} MiB",
                      flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
