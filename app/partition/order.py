"""A locality order of the nodes inside each part (`partition.order=locality`, with relabel).

Nodes whose neighbourhoods overlap should get neighbouring ids: every kernel that walks a
part's destinations in id order and reads their sources' rows (layer-wise evaluation's mean
over all in-edges, above all) then finds most of those rows in cache instead of in DRAM.

The order groups each part's nodes into communities found by label propagation (Raghavan et
al., 2007) on the undirected graph, restricted to edges inside the part: every node starts
with its own label and, visit after visit (in a seeded random order), takes the label most of
its same-part neighbours carry. A community stops growing at `max_size` nodes (so one label
cannot flood a power-law graph, and a community's feature rows stay cache-sized). Nodes are
then numbered part by part, community by community, in their original order within one.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from torch import Tensor

MAX_SIZE = 2048  # nodes per community: 800 kB of 100 float32 features, about an L2 cache
SWEEPS = 3  # label propagation passes (most nodes settle in the first two)


@numba.njit(cache=True)
def _propagate(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    part: np.ndarray,
    visit: np.ndarray,
    max_size: int,
    sweeps: int,
) -> np.ndarray:
    """Community label (a node id) of every node; see the module docstring."""
    n = part.size
    label = np.arange(n)
    size = np.ones(n, np.int64)
    votes = np.zeros(n, np.int64)  # per label, reset after each node
    seen = np.empty(n, np.int64)  # the labels voted for at the current node
    for _ in range(sweeps):
        moved = 0
        for v in visit:
            p, k = part[v], 0
            for j in range(xadj[v], xadj[v + 1]):
                u = adjncy[j]
                if part[u] == p:
                    lab = label[u]
                    if votes[lab] == 0:
                        seen[k] = lab
                        k += 1
                    votes[lab] += 1
            here = label[v]
            best, best_votes = here, votes[here]  # a tie keeps the current label
            for i in range(k):
                lab = seen[i]
                if votes[lab] > best_votes and size[lab] < max_size:
                    best, best_votes = lab, votes[lab]
            for i in range(k):
                votes[seen[i]] = 0
            if best != here:
                size[here] -= 1
                size[best] += 1
                label[v] = best
                moved += 1
        if moved == 0:
            break
    return label


def locality_key(
    csr: tuple[np.ndarray, np.ndarray],
    parts: Tensor,
    seed: int,
    max_size: int = MAX_SIZE,
    sweeps: int = SWEEPS,
) -> Tensor:
    """int64 [N] community of every node (see the module docstring): numbering the nodes of a
    part by (key, id) puts each community's nodes next to each other. `csr`: the graph's
    undirected adjacency, `(xadj, adjncy)` from `app.partition.assign.symmetric_csr` (the one
    METIS reads)."""
    n = parts.numel()
    if n == 0:
        return torch.empty(0, dtype=torch.long)
    xadj, adjncy = csr
    visit = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).numpy()
    label = _propagate(xadj, adjncy, parts.numpy(), visit, max_size, sweeps)
    return torch.from_numpy(label)
