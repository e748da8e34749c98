"""Neighbour sampling in torch ops only: the twin of `kernel.py` for a CSC held on any device.

A GPU holds products' CSC in ~1 GB, so a one-machine GPU job can sample where it trains and
send nothing but seed ids across PCIe. This module does that with stock torch ops (no compiled
extension), the way PyG's `utils/_spmm.py` keeps one entry and a kernel per device:
`NeighborSampler` calls the numba kernel for a CSC in host memory and these functions for one
on a GPU (or on the CPU under `DISTGNN_KERNELS=torch`, how CPU-only CI proves this path).

Without replacement, k of a node's d in-edges are drawn with a random key per edge and a
segmented top-k: every edge of a frontier node with d > k gets the key `(segment << 31) | r`
(r uniform in [0, 2^31)), one sort orders the keys, and the first k of each segment are kept.
The k smallest of d i.i.d. keys are a uniform k-subset, as Floyd's algorithm draws on the CPU.
Nodes with d <= k keep all their edges in CSC order (key `(segment << 31) | position`), so a
fan-out at least the largest degree gives exactly the numba kernel's sample.

Relabelling is the numba kernel's too: seeds first (every seed its own local id, a neighbour
equal to a duplicated seed mapping to its first copy), then each hop's new nodes in order of
first appearance, through a dense map int64[N] of -1 that is reset after each sample.

Randomness comes from a torch generator per hop seeded with `hop_seed(seed, hop)`, so the same
seed gives the same sample on the same device, but not the numba kernel's sample (another
generator): the two agree in distribution (tests/unit/test_torch_sampler.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from app.sampler.kernel import hop_seed

_KEY_BITS = 31
_SEED_MASK = (1 << 63) - 1


@dataclass
class TorchCSC:
    """A CSC graph as int64 tensors on one device (`csc.py`'s layout): in-neighbours of v are
    `row[colptr[v]:colptr[v + 1]]`, `perm[p]` the original edge id at CSC position p."""

    colptr: Tensor
    row: Tensor
    perm: Tensor

    @classmethod
    def from_numpy(
        cls, colptr: np.ndarray, row: np.ndarray, perm: np.ndarray, device: torch.device
    ) -> TorchCSC:
        def put(a: np.ndarray) -> Tensor:
            return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)

        return cls(put(colptr), put(row), put(perm))

    @property
    def device(self) -> torch.device:
        return self.colptr.device

    @property
    def num_nodes(self) -> int:
        return self.colptr.numel() - 1

    def scratch(self) -> Tensor:
        """A fresh relabelling map (int64[N] of -1) for `neighbor_sample`; one per thread."""
        return torch.full((self.num_nodes,), -1, dtype=torch.int64, device=self.device)


def nbytes(num_nodes: int, num_edges: int) -> int:
    """Device bytes a `TorchCSC` of this size and one scratch map take (the `auto` test)."""
    return 8 * (2 * num_nodes + 1 + 2 * num_edges)


def _generator(device: torch.device, seed: int) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed) & _SEED_MASK)
    return gen


def sample_hop(csc: TorchCSC, frontier: Tensor, k: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """Up to k in-neighbours per frontier node without replacement: `(nbrs, epos, counts)`,
    grouped by frontier node in frontier order (k < 0 takes all); `seed` is the hop's seed."""
    device = csc.device
    start = csc.colptr[frontier]
    deg = csc.colptr[frontier + 1] - start
    take = deg if k < 0 else deg.clamp(max=k)
    total = int(deg.sum())
    if total == 0 or k == 0:
        empty = torch.empty(0, dtype=torch.int64, device=device)
        return empty, empty, torch.zeros_like(deg)
    seg = torch.repeat_interleave(
        torch.arange(frontier.numel(), device=device), deg, output_size=total
    )
    pos = torch.arange(total, device=device) - (torch.cumsum(deg, 0) - deg)[seg]
    epos = start[seg] + pos
    if k > 0:
        big = (deg > k)[seg]
        rand = torch.randint(
            0, 1 << _KEY_BITS, (total,), generator=_generator(device, seed), device=device
        )
        keys = (seg << _KEY_BITS) | torch.where(big, rand, pos)
        epos = epos[torch.sort(keys).indices]  # segments stay where they were; only order moves
        keep = pos < take[seg]
        epos = epos[keep]
    return csc.row[epos], epos, take


def _first_seen(values: Tensor) -> tuple[Tensor, Tensor]:
    """(distinct values in order of first appearance, each entry's index into them)."""
    uniq, inv = torch.unique(values, return_inverse=True)
    n = values.numel()
    first = torch.full((uniq.numel(),), n, dtype=torch.int64, device=values.device)
    first.scatter_reduce_(0, inv, torch.arange(n, device=values.device), "amin")
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=values.device)
    return uniq[order], rank[inv]


def neighbor_sample(
    csc: TorchCSC, seeds: Tensor, num_neighbors: list[int], seed: int, scratch: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor, list[int], list[int]]:
    """Fused multi-hop sample with PyG's layout, as `kernel.neighbor_sample` (non-disjoint,
    no time): `(node, row_local, col_local, edge_ids, num_sampled_nodes, num_sampled_edges)`.

    `scratch` is `csc.scratch()` (left as -1 on return); edge ids are original ids (`perm`).
    """
    device = csc.device
    _check_seeds(seeds, csc.num_nodes)
    seeds = seeds.to(device=device, dtype=torch.int64)
    b = seeds.numel()
    uniq, inv = torch.unique(seeds, return_inverse=True)
    first = torch.full((uniq.numel(),), b, dtype=torch.int64, device=device)
    scratch[uniq] = first.scatter_reduce_(0, inv, torch.arange(b, device=device), "amin")
    nodes, rows, cols, epos = [seeds], [], [], []
    nsn, nse = [b], []
    count, frontier, begin = b, seeds, 0
    for hop, k in enumerate(num_neighbors):
        nbrs, ep, counts = sample_hop(csc, frontier, int(k), hop_seed(seed, hop))
        frontier_ids = torch.arange(begin, count, device=device)
        cols.append(torch.repeat_interleave(frontier_ids, counts, output_size=nbrs.numel()))
        local = scratch[nbrs]
        unseen = local < 0
        new, rank = _first_seen(nbrs[unseen])
        local[unseen] = rank + count
        scratch[new] = torch.arange(count, count + new.numel(), device=device)
        rows.append(local)
        epos.append(ep)
        nodes.append(new)
        nsn.append(new.numel())
        nse.append(nbrs.numel())
        begin, count, frontier = count, count + new.numel(), new
    node = torch.cat(nodes)
    scratch[node] = -1
    row, col = _cat(rows, device), _cat(cols, device)
    return node, row, col, csc.perm[_cat(epos, device)], nsn, nse


def _check_seeds(seeds: Tensor, num_nodes: int) -> None:
    """Integer ids in [0, num_nodes), refused in one line (checked where they are: on the host
    for free; ids already on a GPU cost one read-back, where an out-of-range id would
    otherwise end in a device-side assert)."""
    if seeds.dtype.is_floating_point or seeds.dtype == torch.bool:
        raise ValueError(f"seeds must hold integers (got dtype {seeds.dtype}); pass node indices")
    if seeds.numel():
        low, high = int(seeds.min()), int(seeds.max())
        if low < 0 or high >= num_nodes:
            raise ValueError(
                f"seeds holds node ids in [{low}, {high}] but the CSC has {num_nodes} columns; "
                "ids must lie in [0, num_nodes)"
            )


def _cat(chunks: list[Tensor], device: torch.device) -> Tensor:
    return torch.cat(chunks) if chunks else torch.empty(0, dtype=torch.int64, device=device)


def fits(device: torch.device, num_nodes: int, num_edges: int) -> bool:
    """Whether a `TorchCSC` of this graph takes at most a quarter of `device`'s free memory
    (the rest is the features', the model's and the batches'); always true on the CPU."""
    if device.type != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info(device)
    return nbytes(num_nodes, num_edges) <= free // 4
