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
the host reads once before the first hop and once per hop (`bench.readbacks` counts them): a
hop's count of new nodes comes with the next hop's degree sum and kept edge count, computed
from the flagged entries before the frontier is compacted; relabelling scatters codes into the
map instead of calling `torch.unique`, and compaction gathers or scatters to known sizes
instead of indexing with bool masks. Each op is also a kernel the host launches, so the code
keeps them few: segment ids come from `repeat_interleave` of the counts, a kept edge's local
destination is its segment plus the frontier's first local id, and a hop's CSC positions are
gathered only for the edges it keeps.

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
    """Up to k in-neighbours per frontier node without replacement: `(nbrs, epos, seg)`,
    grouped by frontier node in frontier order (k < 0 takes all); `seg` is each kept edge's
    index in `frontier`, `seed` the hop's seed.

    `sizes` is `(sum of the frontier's degrees, edges kept)` when the caller read them already
    (`neighbor_sample` reads them with the previous hop's count); else they are read here, the
    hop's one read-back."""
    device = csc.device
    start = csc.colptr.index_select(0, frontier)
    deg = csc.colptr[1:].index_select(0, frontier) - start
    take = deg if k < 0 else deg.clamp(max=k)
    total, kept = sizes if sizes is not None else _read(deg.sum(), take.sum())
    if total == 0 or k == 0:
        empty = torch.empty(0, dtype=torch.int64, device=device)
        return empty, empty, empty
    seg = torch.repeat_interleave(deg, output_size=total)  # each entry's segment
    first = torch.cumsum(deg, 0) - deg  # each segment's first entry
    if k < 0:
        epos = torch.arange(total, device=device) + (start - first).index_select(0, seg)
        return csc.row.index_select(0, epos), epos, seg
    pos = torch.arange(total, device=device) - first.index_select(0, seg)
    big = (deg > k).index_select(0, seg)
    rand = torch.randint(
        0, 1 << _KEY_BITS, (total,), generator=_generator(device, seed), device=device
    )
    # segments stay where they were; only the order within each moves
    order = torch.sort((seg << _KEY_BITS) | torch.where(big, rand, pos)).indices
    # the first take[s] entries of each segment s, gathered (no mask: their count is known);
    # `skipped`: the entries of the segments before s that are not kept
    seg = torch.repeat_interleave(take, output_size=kept)
    dropped = deg - take
    skipped = torch.cumsum(dropped, 0) - dropped
    entry = order.index_select(0, torch.arange(kept, device=device) + skipped.index_select(0, seg))
    epos = entry + (start - first).index_select(0, seg)
    return csc.row.index_select(0, epos), epos, seg


def _read(*values: Tensor) -> list[int]:
    """Scalars of the device as host ints, in one read-back."""
    return [int(v) for v in torch.stack(values).tolist()]


def _next_sizes(csc: TorchCSC, nodes: Tensor, k: int, flag: Tensor | None = None) -> list[Tensor]:
    """[sum of degrees, edges a hop of fan-out k keeps] over the entries of `nodes` that
    `flag` marks (all if None): the next hop's sizes, before its frontier is compacted."""
    deg = csc.colptr[1:].index_select(0, nodes) - csc.colptr.index_select(0, nodes)
    if flag is not None:
        deg = deg * flag
    return [deg.sum(), (deg if k < 0 else deg.clamp(max=k)).sum()]


def _relabel(scratch: Tensor, nbrs: Tensor, count: int) -> tuple[Tensor, Tensor, Tensor]:
    """Local ids of a hop's neighbours through the map `scratch` (-1: not sampled yet), each
    new node numbered from `count` in order of first appearance; the map is updated.
    Returns `(local ids, flag of each new node's first entry, the running count of flags)`.

    Without `torch.unique` (a read-back), in two scatters into the map. First amin: a sampled
    node's entries write its own id (the map keeps it), a new node's entry i writes the code
    `i - m - 1` (< -1), so a new node's slot ends with its first entry's code, and an entry
    whose code is in the slot is that first one. Then amax: a first entry writes its new id
    (>= 0, above the code), every other entry what its slot holds already."""
    m = nbrs.numel()
    local = scratch.index_select(0, nbrs)
    code = torch.arange(-(m + 1), -1, device=nbrs.device)
    scratch.scatter_reduce_(
        0, nbrs, torch.where(local < 0, code, local), "amin", include_self=False
    )
    slot = scratch.index_select(0, nbrs)
    first = slot == code
    flags = torch.cumsum(first, 0)
    scratch.scatter_reduce_(0, nbrs, torch.where(first, flags + (count - 1), slot), "amax")
    return scratch.index_select(0, nbrs), first, flags


def _pair(values: list[int]) -> tuple[int, int]:
    return values[0], values[1]


def _compact(values: Tensor, flag: Tensor, flags: Tensor, n: int) -> Tensor:
    """`values[flag]` where `n` flags are set and `flags` is their running count, without a
    bool mask (whose size the host would read back): each flagged value scattered to its
    count, the rest to a spare slot 0 dropped after."""
    out = torch.empty(n + 1, dtype=values.dtype, device=values.device)
    return out.scatter_(0, torch.where(flag, flags, 0), values)[1:]


def neighbor_sample(
    csc: TorchCSC, seeds: Tensor, num_neighbors: list[int], seed: int, scratch: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor, list[int], list[int]]:
    """Fused multi-hop sample with PyG's layout, as `kernel.neighbor_sample` (non-disjoint,
    no time): `(node, row_local, col_local, edge_ids, num_sampled_nodes, num_sampled_edges)`.

    `scratch` is `csc.scratch()` (left as -1 on return); edge ids are original ids (`perm`).
    The host reads sizes back once before the first hop and once per hop that draws an edge:
    each read takes a hop's new node count together with the next hop's degree sum and kept
    edge count; a hop with nothing to draw (fan-out 0, no in-edges) ends the sample.
    """
    device = csc.device
    _check_seeds(seeds, csc.num_nodes)
    seeds = seeds.to(device=device, dtype=torch.int64, non_blocking=True)  # a blocking copy waits
    b = seeds.numel()
    # every seed its own local id; the map holds each distinct seed's first copy
    scratch.scatter_reduce_(0, seeds, torch.arange(b, device=device), "amin", include_self=False)
    nodes, rows, cols, epos = [seeds], [], [], []
    nsn, nse = [b], []
    count, frontier = b, seeds
    sizes = (0, 0)
    if num_neighbors:
        sizes = _pair(_read(*_next_sizes(csc, seeds, int(num_neighbors[0]))))
    for hop, k in enumerate(num_neighbors):
        if sizes[0] == 0 or k == 0:  # no edge to draw, here or in any later hop
            nsn += [0] * (len(num_neighbors) - hop)
            nse += [0] * (len(num_neighbors) - hop)
            break
        nbrs, ep, seg = sample_hop(csc, frontier, int(k), hop_seed(seed, hop), sizes)
        cols.append(seg + (count - frontier.numel()))  # the frontier's local ids start there
        local, first, flags = _relabel(scratch, nbrs, count)
        if hop + 1 == len(num_neighbors):
            (n_new,) = _read(flags[-1])
        else:
            k_next = int(num_neighbors[hop + 1])
            n_new, *next_sizes = _read(flags[-1], *_next_sizes(csc, nbrs, k_next, first))
            sizes = _pair(next_sizes)
        new = _compact(nbrs, first, flags, n_new)
        rows.append(local)
        epos.append(ep)
        nodes.append(new)
        nsn.append(n_new)
        nse.append(nbrs.numel())
        count, frontier = count + n_new, new
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
