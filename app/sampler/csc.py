"""Edge list → CSC (compressed sparse columns over destinations), the layout every sampler reads.

In-neighbours of node v are `row[colptr[v]:colptr[v + 1]]`; `perm[p]` is the original edge id
(column of `edge_index`) stored at CSC position p, so sampled CSC positions map back to edge ids
(and edge features) with `perm[epos]`. The sort is a stable counting sort: O(N + E) time, and
within a column the edges keep their original order. That stability matters: a partition's CSC
built from a subset of the edges (same relative order) holds each owned column exactly as the
full graph does, so a seeded sampler draws the same neighbours from either.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit


@njit(cache=True, nogil=True)
def _counting_sort(src: np.ndarray, dst: np.ndarray, colptr: np.ndarray):
    """Scatter edges into CSC order; `colptr` holds the column starts on entry."""
    num_edges = src.shape[0]
    nxt = colptr[:-1].copy()
    row = np.empty(num_edges, np.int64)
    perm = np.empty(num_edges, np.int64)
    for e in range(num_edges):
        p = nxt[dst[e]]
        row[p] = src[e]
        perm[p] = e
        nxt[dst[e]] = p + 1
    return row, perm


def as_index_array(values: torch.Tensor | np.ndarray, name: str) -> np.ndarray:
    """A contiguous int64 numpy view/copy of an index tensor or array."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    arr = np.ascontiguousarray(values)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integers (got dtype {arr.dtype}); pass node indices")
    return arr.astype(np.int64, copy=False)


def to_csc(
    edge_index: torch.Tensor | np.ndarray, num_nodes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Build `(colptr[N+1], row[E], perm[E])` (int64 numpy) from a `[2, E]` edge list src → dst.

    `num_nodes` counts destination nodes (columns); sources may be of another node type.
    """
    ei = as_index_array(edge_index, "edge_index")
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape [2, E] (got {list(ei.shape)})")
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be >= 0 (got {num_nodes})")
    src, dst = np.ascontiguousarray(ei[0]), np.ascontiguousarray(ei[1])
    if ei.shape[1] > 0 and (int(ei.min()) < 0 or int(dst.max()) >= num_nodes):
        raise ValueError(
            f"edge_index holds ids in [{int(ei.min())}, {int(ei.max())}] (destinations up to "
            f"{int(dst.max())}) but num_nodes is {num_nodes}; ids must be >= 0 and destinations "
            "< num_nodes"
        )
    colptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=num_nodes), out=colptr[1:])
    row, perm = _counting_sort(src, dst, colptr)
    return colptr, row, perm
