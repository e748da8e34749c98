"""Numba loops of layer-wise inference that torch runs as several passes or slow reductions.

Each is one pass over its input, single-threaded (a trainer runs one compute thread; see
`app.model.gnn._csr_spmm`). Measured on a products partition (1.22M owned nodes, 30.6M
in-edges, one thread): the read plan, which marks every in-edge's source, 0.11-0.15 -> 0.04 s
(torch converted each 1M-edge piece to int64, then scattered); the argmax of 47 logits in
48-float rows 0.12 -> 0.04 s (torch reduces a strided last dimension element by element).
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from torch import Tensor


@numba.njit(nogil=True, cache=True)
def _mark(ids, flags):  # pragma: no cover - compiled
    """flags[ids] = True up to the first id out of range; returns its position, or -1."""
    n = flags.shape[0]
    for j in range(ids.shape[0]):
        i = ids[j]
        if i < 0 or i >= n:
            return j
        flags[i] = True
    return -1


def mark_ids(ids: Tensor, flags: Tensor) -> None:
    """`flags[ids] = True` (`flags` bool; `ids` any integer dtype, no int64 copy). An id out
    of range is an error that names it (a corrupt partition), not a write past the array."""
    bad = _mark(ids.numpy(), flags.numpy())
    if bad >= 0:
        raise IndexError(f"node id {int(ids[bad])} out of range [0, {flags.numel()})")


@numba.njit(nogil=True, cache=True)
def _argmax(rows, out):  # pragma: no cover - compiled
    """out[i] = the first index of row i's largest value; a NaN wins (as `torch.argmax`)."""
    for i in range(rows.shape[0]):
        best, k = rows[i, 0], 0
        if best == best:
            for f in range(1, rows.shape[1]):
                v = rows[i, f]
                if v != v:
                    k = f
                    break
                if v > best:
                    best, k = v, f
        out[i] = k


def row_argmax(rows: Tensor) -> Tensor:
    """`rows.argmax(dim=-1)` of a 2-D float tensor whose rows may be strided (a view of the
    leading columns of wider rows), without copying it."""
    if rows.dim() != 2 or not rows.size(1):
        raise ValueError(f"expected [n, k > 0] rows, got {list(rows.shape)}")
    if rows.device.type != "cpu":
        return rows.argmax(dim=-1)
    out = np.empty(rows.size(0), np.int64)
    _argmax(rows.detach().numpy(), out)
    return torch.from_numpy(out)
