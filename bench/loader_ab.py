"""Interleaved A/B of the local loader's CPU per batch: two code trees, the same batches.

    python -m bench.loader_ab OLD_TREE NEW_TREE [batches]     # default 16 batches each

Each tree (a checkout or an export of a commit, e.g. `git archive <commit> | tar x -C DIR`)
runs `NeighborLoader.collate` in a child process of its own on the `dist_sampling` bench's
graph and workload (200k nodes, fan-out [15, 10, 5], batch 1024, 100 float features, one torch
thread); the children build one batch at a time in turn (old, new, new, old, ...), the consumer
holding the previous batch, so both see the same machine load. Printed: the median process CPU
per batch of each tree after 3 warm-up batches, its per-stage split (`app.sampler.stages`,
where the tree has it), and new ÷ old.
"""

from __future__ import annotations

import ast
import os
import statistics
import subprocess
import sys
from pathlib import Path

WARMUP = 3
CHILD = r"""
import sys, time, torch
torch.set_num_threads(1)
from bench.dist_sampling import BATCH, FANOUT, _graph
from app.loader.node_loader import NeighborLoader
try:
    from app.sampler.stages import snapshot
except ImportError:  # a tree from before the stage clock
    snapshot = dict
loader = NeighborLoader(_graph(200_000), FANOUT, batch_size=BATCH, shuffle=True)
held = None
print("ready", flush=True)
for index, seed in loader.epoch_jobs():
    if not sys.stdin.readline():
        break
    before, start = snapshot(), time.process_time()
    held = loader.collate(index, seed)  # the consumer holds it while the next one is built
    cpu, after = time.process_time() - start, snapshot()
    print(repr((cpu, {k: after[k] - before[k] for k in after})), flush=True)
"""


def _child(tree: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=f"{tree}:{tree / 'launchers'}")
    proc = subprocess.Popen([sys.executable, "-c", CHILD], cwd=tree, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"the loader of {tree} did not start; run its CHILD code there to see why")
    return proc


def _batch(proc: subprocess.Popen) -> tuple[float, dict[str, float]]:
    proc.stdin.write("\n")
    proc.stdin.flush()
    return ast.literal_eval(proc.stdout.readline())


def main(old: Path, new: Path, batches: int) -> None:
    procs = {"old": _child(old), "new": _child(new)}
    got: dict[str, list] = {name: [] for name in procs}
    for i in range(batches + WARMUP):
        for name in ("old", "new") if i % 2 == 0 else ("new", "old"):
            got[name].append(_batch(procs[name]))
    for proc in procs.values():
        proc.stdin.close()
        proc.wait(60)
    median = {}
    for name, rows in got.items():
        rows = rows[WARMUP:]
        median[name] = statistics.median(cpu for cpu, _ in rows)
        split = {k: statistics.median(r[1][k] for r in rows) for k in rows[0][1]}
        parts = " ".join(f"{k} {v * 1e3:.1f}" for k, v in split.items() if v)
        print(f"{name}: {median[name] * 1e3:.1f} ms CPU per batch | {parts}")
    print(f"new / old: {median['new'] / median['old']:.3f}")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        raise SystemExit("usage: python -m bench.loader_ab OLD_TREE NEW_TREE [batches]")
    count = int(sys.argv[3]) if len(sys.argv) == 4 else 16
    main(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve(), count)
