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

On a GPU each size the host reads back (an output's length) waits for the stream to drain, so
the host reads once per hop and once at the end (`bench.readbacks` counts them): a hop's count
of new nodes comes with the next hop's degree sum and kept edge count, computed from the
flagged entries before the frontier is compacted; relabelling scatters codes into the map
instead of calling `torch.unique`, and compaction gathers or scatters to known sizes instead
of indexing with bool masks.

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


def sample_hop(
    csc: TorchCSC, frontier: Tensor, k: int, seed: int, sizes: tuple[int, int] | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Up to k in-neighbours per frontier node without replacement: `(nbrs, epos, counts)`,
    grouped by frontier node in frontier order (k < 0 takes all); `seed` is the hop's seed.

    `sizes` is `(sum of the frontier's degrees, edges kept)` when the caller read them already
    (`neighbor_sample` reads them with the previous hop's count); else they are read here, the
    hop's one read-back."""
    device = csc.device
    start = csc.colptr.index_select(0, frontier)
    deg = csc.colptr.index_select(0, frontier + 1) - start
    take = deg if k < 0 else deg.clamp(max=k)
    total, kept = sizes if sizes is not None else _read(deg.sum(), take.sum())
    if total == 0 or k == 0:
        empty = torch.empty(0, dtype=torch.int64, device=device)
        return empty, empty, torch.zeros_like(deg)
    frontier_ids = torch.arange(frontier.numel(), device=device)
    seg = torch.repeat_interleave(frontier_ids, deg, output_size=total)
    first = torch.cumsum(deg, 0) - deg  # each segment's first entry
    pos = torch.arange(total, device=device) - first.index_select(0, seg)
    epos = start.index_select(0, seg) + pos
    if k > 0:
        big = (deg > k).index_select(0, seg)
        rand = torch.randint(
            0, 1 << _KEY_BITS, (total,), generator=_generator(device, seed), device=device
        )
        keys = (seg << _KEY_BITS) | torch.where(big, rand, pos)
        # segments stay where they were; only the order within each moves
        epos = epos.index_select(0, torch.sort(keys).indices)
        # the first take[s] entries of each segment s, gathered (no mask: its size is known)
        kept_seg = torch.repeat_interleave(frontier_ids, take, output_size=kept)
        taken_before = torch.cumsum(take, 0) - take
        at = first - taken_before  # a kept entry sits at its index among the kept + its `at`
        epos = epos.index_select(
            0, torch.arange(kept, device=device) + at.index_select(0, kept_seg)
        )
    return csc.row.index_select(0, epos), epos, take


def _read(*values: Tensor) -> list[int]:
    """Scalars of the device as host ints, in one read-back."""
    return [int(v) for v in torch.stack(values).tolist()]


def _next_sizes(csc: TorchCSC, nodes: Tensor, k: int, flag: Tensor | None = None) -> list[Tensor]:
    """[sum of degrees, edges a hop of fan-out k keeps] over the entries of `nodes` that
    `flag` marks (all if None): the next hop's sizes, before its frontier is compacted."""
    deg = csc.colptr.index_select(0, nodes + 1) - csc.colptr.index_select(0, nodes)
    if flag is not None:
        deg = deg * flag
    return [deg.sum(), (deg if k < 0 else deg.clamp(max=k)).sum()]


def _relabel(scratch: Tensor, nbrs: Tensor, count: int) -> tuple[Tensor, Tensor, Tensor]:
    """Local ids of a hop's neighbours through the map `scratch` (-1: not sampled yet), each
    new node numbered from `count` in order of first appearance; the map is updated.
    Returns `(local ids, flag of each new node's first entry, its rank among them)`.

    Without `torch.unique` (a read-back): every entry scatters a code into the map with amin,
    a sampled node its own id (the map keeps it), a new node `position - m - 1` (< -1), so a
    new node's slot ends with its first entry's code; an entry whose code is in the slot is
    that first one."""
    m = nbrs.numel()
    local = scratch.index_select(0, nbrs)
    unseen = local < 0
    code = torch.arange(m, device=nbrs.device) - (m + 1)
    scratch.scatter_reduce_(0, nbrs, torch.where(unseen, code, local), "amin", include_self=False)
    slot = scratch.index_select(0, nbrs)
    first = unseen & (slot == code)
    rank = torch.cumsum(first, 0) - 1
    local = torch.where(unseen, count + rank.index_select(0, (slot + m + 1).clamp(0, m - 1)), local)
    scratch.scatter_(0, nbrs, local)
    return local, first, rank


def _pair(values: list[int]) -> tuple[int, int]:
    return values[0], values[1]


def _compact(values: Tensor, flag: Tensor, rank: Tensor, n: int) -> Tensor:
    """`values[flag]` where `n` flags are set and `rank` is their running count - 1, without a
    bool mask (whose size the host would read back): each flagged value scattered to its rank,
    the rest to a spare slot dropped after."""
    out = torch.empty(n + 1, dtype=values.dtype, device=values.device)
    return out.scatter_(0, torch.where(flag, rank, n), values)[:n]


def neighbor_sample(
    csc: TorchCSC, seeds: Tensor, num_neighbors: list[int], seed: int, scratch: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor, list[int], list[int]]:
    """Fused multi-hop sample with PyG's layout, as `kernel.neighbor_sample` (non-disjoint,
    no time): `(node, row_local, col_local, edge_ids, num_sampled_nodes, num_sampled_edges)`.

    `scratch` is `csc.scratch()` (left as -1 on return); edge ids are original ids (`perm`).
    The host reads sizes back once per hop and once at the end: each read takes a hop's new
    node count together with the next hop's degree sum and kept edge count.
    """
    device = csc.device
    _check_seeds(seeds, csc.num_nodes)
    seeds = seeds.to(device=device, dtype=torch.int64, non_blocking=True)  # a blocking copy waits
    b = seeds.numel()
    # every seed its own local id; the map holds each distinct seed's first copy
    scratch.scatter_reduce_(0, seeds, torch.arange(b, device=device), "amin", include_self=False)
    nodes, rows, cols, epos = [seeds], [], [], []
    nsn, nse = [b], []
    count, frontier, begin = b, seeds, 0
    sizes = (0, 0)
    if num_neighbors:
        sizes = _pair(_read(*_next_sizes(csc, seeds, int(num_neighbors[0]))))
    for hop, k in enumerate(num_neighbors):
        nbrs, ep, counts = sample_hop(csc, frontier, int(k), hop_seed(seed, hop), sizes)
        frontier_ids = torch.arange(begin, count, device=device)
        cols.append(torch.repeat_interleave(frontier_ids, counts, output_size=nbrs.numel()))
        local, first, rank = _relabel(scratch, nbrs, count)
        if hop + 1 == len(num_neighbors):
            (n_new,) = _read(first.sum())
        else:
            k_next = int(num_neighbors[hop + 1])
            n_new, *next_sizes = _read(first.sum(), *_next_sizes(csc, nbrs, k_next, first))
            sizes = _pair(next_sizes)
        new = _compact(nbrs, first, rank, n_new)
        rows.append(local)
        epos.append(ep)
        nodes.append(new)
        nsn.append(n_new)
        nse.append(nbrs.numel())
        begin, count, frontier = count, count + n_new, new
    node = torch.cat(nodes)
    scratch.index_fill_(0, node, -1)
    row, col = _cat(rows, device), _cat(cols, device)
    return node, row, col, csc.perm.index_select(0, _cat(epos, device)), nsn, nse


def _check_seeds(seeds: Tensor, num_nodes: int) -> None:
    """Integer ids in [0, num_nodes), refused in one line (checked where they are: on the host
    for free; ids already on a GPU cost one read-back, where an out-of-range id would
    otherwise end in a device-side assert)."""
    if seeds.dtype.is_floating_point or seeds.dtype == torch.bool:
        raise ValueError(f"seeds must hold integers (got dtype {seeds.dtype}); pass node indices")
    if seeds.numel():
        low, high = _read(seeds.min(), seeds.max())
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
