"""Interleaved A/B of the local loader's CPU per batch: two code trees, the same batches.

    python -m bench.loader_ab OLD_TREE NEW_TREE [batches] [--dist]   # default 16 batches each

Each tree (a checkout or an export of a commit, e.g. `git archive <commit> | tar x -C DIR`)
runs `NeighborLoader.collate` in a child process of its own on the `dist_sampling` bench's
graph and workload (200k nodes, fan-out [15, 10, 5], batch 1024, 100 float features, one torch
thread); the children build one batch at a time in turn (old, new, new, old, ...), the consumer
holding the previous batch, so both see the same machine load. Printed: the median process CPU
per batch of each tree after 3 warm-up batches, its per-stage split (`app.sampler.stages`,
where the tree has it), and new ÷ old.

`--dist`: the distributed sampler instead (`DistNeighborSampler.sample_batch`, in process, on
one partition of the same graph written once under /tmp by this tree's partitioner): its hop
loop and relabelling as a sampler process runs them, without RPC (one partition
owns every node, so nothing is routed to a peer), and the batch's assembly (`assemble`, the
trainer's side where the sampler sends a record, `app.sampler.output`).
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


DIST_CHILD = r"""
import sys, time, torch
torch.set_num_threads(1)
import numpy as np
from bench.dist_sampling import BATCH, FANOUT
from app.distributed.sampler import DistNeighborSampler, SamplerOptions
from app.distributed.server import load_stores
from app.sampler.stages import snapshot
try:  # the sampler sends a record and the trainer builds the batch: both counted here
    from app.loader.batch import assemble
except ImportError:  # a tree whose sampler built the batch itself
    assemble = lambda record: record
sampler = DistNeighborSampler(load_stores(sys.argv[1], 0), options=SamplerOptions(FANOUT))
sampler.prepare(2)
order = torch.from_numpy(np.random.default_rng(0).permutation(200_000))
held = None
print("ready", flush=True)
for i in range(0, order.numel(), BATCH):
    if not sys.stdin.readline():
        break
    seeds = order[i : i + BATCH]
    before, start = snapshot(), time.process_time()
    held = assemble(sampler.sample_batch(seeds, torch.arange(seeds.numel()), seed=i))
    cpu, after = time.process_time() - start, snapshot()
    print(repr((cpu, {k: after[k] - before[k] for k in after})), flush=True)
"""
PARTS = Path("/tmp/distgnn_loader_ab_parts")  # the --dist mode's one-partition graph


def _partition() -> Path:
    """The bench graph as one partition (written once; both trees read the same files)."""
    from app.partition.writer import partition_graph
    from bench.dist_sampling import _graph

    if not (PARTS / "META.json").exists():
        partition_graph(_graph(200_000), PARTS, 1, method="random")
    return PARTS


def _child(tree: Path, dist: bool) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=f"{tree}:{tree / 'launchers'}")
    code = ["-c", DIST_CHILD, str(_partition())] if dist else ["-c", CHILD]
    proc = subprocess.Popen([sys.executable, *code], cwd=tree, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"the loader of {tree} did not start; run its CHILD code there to see why")
    return proc


def _batch(proc: subprocess.Popen) -> tuple[float, dict[str, float]]:
    proc.stdin.write("\n")
    proc.stdin.flush()
    return ast.literal_eval(proc.stdout.readline())


def main(old: Path, new: Path, batches: int, dist: bool = False) -> None:
    procs = {"old": _child(old, dist), "new": _child(new, dist)}
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
    args = [a for a in sys.argv[1:] if a != "--dist"]
    if len(args) not in (2, 3):
        raise SystemExit("usage: python -m bench.loader_ab OLD_TREE NEW_TREE [batches] [--dist]")
    count = int(args[2]) if len(args) == 3 else 16
    main(Path(args[0]).resolve(), Path(args[1]).resolve(), count, "--dist" in sys.argv)
