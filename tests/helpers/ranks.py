"""A group of spawned processes, one per rank, each reporting one pickled result on a queue:
how the tests drive a PyG-style script's ranks (`torch.multiprocessing`, spawn)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import torch


def run_ranks(target: Callable, args: list[tuple], timeout_s: float = 120.0) -> dict[int, Any]:
    """Run `target(*args[r], queue)` for every rank r; return {rank: result}.

    Each rank puts `pickle.dumps((rank, result))` on the queue (bytes: tensors outlive the
    process); a rank that fails should put its error as a string, so the test names it at once
    instead of waiting out `timeout_s`. Survivors are killed; every rank must exit 0."""
    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, queue)) for a in args]
    for p in procs:
        p.start()
    try:
        results = dict(pickle.loads(queue.get(timeout=timeout_s)) for _ in procs)
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()
    failed = {r: v for r, v in results.items() if isinstance(v, str)}
    assert not failed, f"ranks failed: {failed}"
    assert [p.exitcode for p in procs] == [0] * len(procs)
    return results
