"""The one scatter/gather behind every distributed lookup: hops, feature rows, DistTensor rows.

1. `split_by_owner`: the request's positions grouped by the partition that owns them;
2. `route`: one call to every remote owner, all started before the local part runs in this
   process (so local and remote work overlap), then every answer awaited — each wait bounded by
   the job's RPC timeout, failures raised as `PeerError` naming the peer (`rpc.PendingCall`);
3. `merge_rows` (fixed-size rows) / `merge_ragged` (a variable number of items per position, as
   a hop's neighbours) put the answers back in request order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, TypeVar

import numpy as np

from app.distributed.rpc import PendingCall

W = TypeVar("W")  # what one partition is asked for (its positions, or a ready request)
SCAN_PARTS = 8  # split_by_owner scans once per partition below this many
Positions = np.ndarray | None  # positions into the request; None: all of them
HopResult = tuple[np.ndarray, np.ndarray, np.ndarray]  # (neighbour ids, edge ids, counts)


def split_by_owner(owner: np.ndarray) -> dict[int, Positions]:
    """Partition → positions it owns (ascending); None means "all of them" (the common case).

    Few partitions: one vectorised scan per partition (4-8x faster than a stable sort of the
    int64 owners at 2-8 partitions); more: a stable sort of 16-bit keys (numpy radix-sorts
    those: 1.5-3x faster)."""
    if owner.size == 0:
        return {}
    lo, hi = int(owner.min()), int(owner.max())
    if lo == hi:
        return {lo: None}
    counts = np.bincount(owner, minlength=hi + 1)
    if hi < SCAN_PARTS:
        return {p: np.flatnonzero(owner == p) for p, c in enumerate(counts) if c}
    order = np.argsort(owner.astype(np.int16) if hi < 2**15 else owner, kind="stable")
    bounds = np.cumsum(counts)
    return {p: order[bounds[p] - c : bounds[p]] for p, c in enumerate(counts) if c}


def take(values: Any, where: Positions) -> Any:
    """The entries of `values` at `where` (all of them for None)."""
    return values if where is None else values[where]


def route(
    work: dict[int, W],
    local: Collection[int],
    call: Callable[[int, W], PendingCall],
    run: Callable[[int, W], Any],
) -> dict[int, Any]:
    """Answers of every partition in `work`: `call(p, w)` starts partition p's remote request,
    `run(p, w)` answers it in this process (for p in `local`). Every remote call is in flight
    before the first local part runs; the remote answers are awaited last."""
    pending = {p: call(p, w) for p, w in work.items() if p not in local}
    answers = {p: run(p, w) for p, w in work.items() if p in local}
    for p, c in pending.items():
        answers[p] = c.wait()
    return answers


def merge_rows(split: dict[int, Positions], answers: dict[int, Any], out: Any) -> Any:
    """Write each partition's rows into `out` (numpy or torch, one row per request position)
    at the positions `split` gave it; returns `out`."""
    for p, rows in answers.items():
        where = split[p]
        if where is None:
            out[:] = rows
        elif where.size and where[-1] - where[0] + 1 == where.size:  # ascending: a range
            out[int(where[0]) : int(where[-1]) + 1] = rows  # one block copy, no scatter
        else:
            out[where] = rows
    return out


def merge_ragged(pieces: list[tuple[Positions, HopResult]], n: int) -> HopResult:
    """Interleave per-partition hop results back into frontier order.

    `pieces`: (frontier positions, or None for all, (nbrs, eids, counts) of those positions).
    """
    if len(pieces) == 1 and pieces[0][0] is None:
        return pieces[0][1]
    counts = np.zeros(n, np.int64)
    for idx, (_, _, c) in pieces:
        counts[idx] = c
    offsets = np.cumsum(counts) - counts
    total = int(counts.sum())
    nbrs, eids = np.empty(total, np.int64), np.empty(total, np.int64)
    for idx, (nb, eid, c) in pieces:
        c = c.astype(np.int64, copy=False)
        # element j of this piece goes to offsets[its node] + (j - start of its node in the piece)
        pos = np.arange(nb.size) + np.repeat(offsets[idx] - (np.cumsum(c) - c), c)
        nbrs[pos], eids[pos] = nb, eid
    return nbrs, eids, counts
