"""Numba neighbour-sampling kernels over a CSC graph: one hop, relabelling, and a fused multi-hop.

Randomness: every frontier entry draws from its own counter-based stream seeded by
`(hop seed, global node id)` (splitmix64). So a node's sample in a hop does not depend on where it
sits in the frontier, on which other nodes are sampled, or on which process samples it: the fused
kernel equals `sample_hop` + `Relabeler` composed hop by hop for ANY fan-out (given
`hop_seed(seed, hop)` per hop), and a distributed sampler whose partitions hold the same CSC
columns (see `csc.py`) reproduces the local sample exactly. The same seed gives the same sample.

Without replacement, k of d neighbours are drawn by Floyd's algorithm (k <= 32: no scratch, no
O(d) pass) or a partial Fisher-Yates shuffle (larger k). All kernels are `nogil` and keep state in
arguments or locals only, so threads may call them concurrently (each with its own scratch).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from app.sampler.csc import as_index_array

STRATEGIES = ("uniform", "last")
_MASK = (1 << 64) - 1
_GOLDEN_INT = 0x9E3779B97F4A7C15
_GOLDEN = np.uint64(_GOLDEN_INT)
_INV53 = 1.0 / float(1 << 53)
_FLOYD_MAX_K = 32
_NO_TREE = np.empty(0, np.int64)


# Random streams ###################################################################################


@njit(cache=True, nogil=True)
def _mix(z):
    """splitmix64 finaliser: a strong 64-bit hash of a uint64."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def _entry_state(hop_seed, v):
    return _mix(hop_seed ^ (np.uint64(v) * _GOLDEN))


@njit(cache=True, nogil=True)
def _randint(state, n):
    """Advance the stream; return (state, uniform integer in [0, n))."""
    state = state + _GOLDEN
    r = _mix(state) >> np.uint64(11)
    return state, np.int64(np.float64(r) * _INV53 * n)


def _mix_int(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def hop_seed(seed: int, hop: int) -> int:
    """The seed of hop `hop` of a sample seeded with `seed` (what the fused kernel uses)."""
    return _mix_int((int(seed) + (hop + 1) * _GOLDEN_INT) & _MASK)


def derive_seed(*parts: int) -> int:
    """Hash several integers (sampler seed, epoch, batch index, ...) into one 64-bit seed."""
    z = 0
    for p in parts:
        z = _mix_int((z + int(p) + _GOLDEN_INT) & _MASK)
    return z


# One frontier entry ###############################################################################


@njit(cache=True, nogil=True)
def _filter_time(colptr, row, v, node_time, seed_time, ti, buf):
    """Copy the CSC positions of v's in-edges whose source is not later than seed_time[ti]."""
    m = 0
    t = seed_time[ti]
    for p in range(colptr[v], colptr[v + 1]):
        if node_time[row[p]] <= t:
            buf[m] = p
            m += 1
    return m


@njit(cache=True, nogil=True)
def _take_latest(row, node_time, buf, m, k, out, off):
    times = np.empty(m, node_time.dtype)
    for j in range(m):
        times[j] = node_time[row[buf[j]]]
    order = np.argsort(times, kind="mergesort")
    for j in range(k):
        out[off + j] = buf[order[m - k + j]]
    return k


@njit(cache=True, nogil=True)
def _draw_small(m, k, replace, state, out, off):
    """k indices in [0, m): with replacement, or distinct via Floyd (k small)."""
    if replace:
        for j in range(k):
            state, r = _randint(state, m)
            out[off + j] = r
        return k
    cnt = 0
    for j in range(m - k, m):
        state, r = _randint(state, j + 1)
        for q in range(off, off + cnt):
            if out[q] == r:
                r = j
                break
        out[off + cnt] = r
        cnt += 1
    return k


@njit(cache=True, nogil=True)
def _sample_one(
    colptr, row, v, k, replace, state, has_time, node_time, seed_time, ti, last, out, off, buf
):
    """Write sampled CSC positions of v's in-edges to out[off:]; return how many."""
    start = colptr[v]
    m = colptr[v + 1] - start
    if m == 0:
        return 0
    if has_time:
        m = _filter_time(colptr, row, v, node_time, seed_time, ti, buf)
        if m == 0:
            return 0
    if k < 0 or (m <= k and (not replace or (last and has_time))):
        for j in range(m):
            out[off + j] = buf[j] if has_time else start + j
        return m
    if has_time and last:
        return _take_latest(row, node_time, buf, m, k, out, off)
    if replace or k <= _FLOYD_MAX_K:
        _draw_small(m, k, replace, state, out, off)
        for j in range(off, off + k):
            out[j] = buf[out[j]] if has_time else start + out[j]
        return k
    if not has_time:
        for j in range(m):
            buf[j] = start + j
    for j in range(k):  # partial Fisher-Yates over the candidate positions
        state, r = _randint(state, m - j)
        r += j
        tmp = buf[j]
        buf[j] = buf[r]
        buf[r] = tmp
        out[off + j] = buf[j]
    return k


@njit(cache=True, nogil=True)
def _hop_bound(colptr, nodes, begin, end, k, replace):
    """Upper bound on the edges a hop over nodes[begin:end] yields, and the largest degree."""
    total = 0
    maxdeg = 0
    for i in range(begin, end):
        v = nodes[i]
        deg = colptr[v + 1] - colptr[v]
        maxdeg = max(maxdeg, deg)
        if k < 0:
            total += deg
        elif replace:
            total += k if deg > 0 else 0
        else:
            total += min(deg, k)
    return total, maxdeg


@njit(cache=True, nogil=True)
def _scratch(maxdeg, k, replace, has_time):
    need = has_time or (k > _FLOYD_MAX_K and not replace)
    return np.empty(maxdeg if need else 0, np.int64)


@njit(cache=True, nogil=True)
def _sample_hop(colptr, row, frontier, k, replace, seed, has_time, node_time, seed_time, last):
    n = frontier.shape[0]
    total, maxdeg = _hop_bound(colptr, frontier, 0, n, k, replace)
    epos = np.empty(total, np.int64)
    buf = _scratch(maxdeg, k, replace, has_time)
    counts = np.empty(n, np.int64)
    off = 0
    for i in range(n):
        v = frontier[i]
        st = _entry_state(seed, v)
        c = _sample_one(
            colptr, row, v, k, replace, st, has_time, node_time, seed_time, i, last, epos, off, buf
        )
        counts[i] = c
        off += c
    epos = epos[:off].copy()
    return row[epos], epos, counts


# Relabelling ######################################################################################


@njit(cache=True, nogil=True)
def _grow(arr, need):
    if need <= arr.shape[0]:
        return arr
    out = np.empty(max(need, 2 * arr.shape[0]), arr.dtype)
    out[: arr.shape[0]] = arr
    return out


@njit(cache=True, nogil=True)
def _slot(keys, key):
    """Slot of `key` in the open-addressing table, or the empty slot where it would go."""
    mask = keys.shape[0] - 1
    h = np.int64(_mix(np.uint64(key)) & np.uint64(mask))
    while keys[h] != -1 and keys[h] != key:
        h = (h + 1) & mask
    return h


@njit(cache=True, nogil=True)
def _build_table(min_size, nodes, batch, count, num_nodes, slots):
    """A (keys, vals) table of capacity >= 2*min_size holding key (batch, node) → local id."""
    cap = 16
    while cap < 2 * min_size:
        cap *= 2
    keys = np.full(cap, -1, np.int64)
    vals = np.empty(cap, np.int64)
    for i in range(count):
        key = batch[i] * num_nodes + nodes[i]
        h = _slot(keys, key)
        keys[h] = key
        vals[h] = i
        slots[i] = h
    return keys, vals


@njit(cache=True, nogil=True)
def _add_dense(nmap, nodes, count, new, every):
    """Map `new` through the dense map, appending unseen nodes (all of them when `every`)."""
    local = np.empty(new.shape[0], np.int64)
    for j in range(new.shape[0]):
        u = new[j]
        loc = nmap[u]
        if loc < 0 or every:
            nodes[count] = u
            if loc < 0:
                nmap[u] = count
            loc = count
            count += 1
        local[j] = loc
    return local, count


@njit(cache=True, nogil=True)
def _relabel_dense(src, dst, first, last, nmap, nodes, count, num_nodes):
    """dst[j] = the local id of node src[j] for j in [first, last), through the dense map; unseen
    nodes get the next ids (appended to nodes). dst may be src (in place). Returns (count, bad):
    bad is the first j whose node lies outside [0, num_nodes), where it stopped, else -1."""
    for j in range(first, last):
        u = src[j]
        if u < 0 or u >= num_nodes:
            return count, j
        loc = nmap[u]
        if loc < 0:
            loc = count
            nmap[u] = count
            nodes[count] = u
            count += 1
        dst[j] = loc
    return count, -1


@njit(cache=True, nogil=True)
def _relabel_keyed(
    src, dst, owner, trees, first, last, keys, vals, slots, nodes, batch, count, num_nodes
):
    """Disjoint variant of `_relabel_dense`: the key is (trees[owner[j]], src[j]), the node in
    the seed tree of its owner, through the open-addressing table; new keys' slots go to slots
    (for a reset). owner may be dst: owner[j] is read before dst[j] is written."""
    for j in range(first, last):
        u = src[j]
        if u < 0 or u >= num_nodes:
            return count, j
        b = trees[owner[j]]
        key = b * num_nodes + u
        h = _slot(keys, key)
        if keys[h] == -1:
            keys[h] = key
            vals[h] = count
            slots[count] = h
            nodes[count] = u
            batch[count] = b
            count += 1
        dst[j] = vals[h]
    return count, -1


@njit(cache=True, nogil=True)
def _hop_columns(counts, dst_local, cols):
    """cols: dst_local[i] repeated counts[i] times, in turn."""
    j = 0
    for i in range(counts.shape[0]):
        c = counts[i]
        cols[j : j + c] = dst_local[i]
        j += c


@njit(cache=True, nogil=True)
def _add_hop(
    nmap, keys, vals, slots, nodes, batch, count, nbrs, counts, dst_local, dst_tree, num_nodes
):
    """One hop's edges in local ids in one call: neighbour j of frontier entry i (counts[i]
    each, in order) gets its local id in rows[j] (unseen nodes the next ids; disjoint, when
    dst_tree is given: keyed by (dst_tree[i], node)) and dst_local[i] in cols[j]. Tight loops
    apart (the relabelling the fused kernel runs too), not one: a fused loop was slower. Returns (rows, cols, count, bad): bad is the first
    j with nbrs[j] outside [0, num_nodes), where relabelling stopped (count then covers the
    nodes added before it), -2 when counts do not sum to the neighbours' number, or -1."""
    m = nbrs.shape[0]
    rows = np.empty(m, np.int64)
    cols = np.empty(m, np.int64)
    if counts.sum() != m:
        return rows, cols, count, -2
    if dst_tree.shape[0] == 0:
        count, bad = _relabel_dense(nbrs, rows, 0, m, nmap, nodes, count, num_nodes)
    else:  # rows first hold each edge's frontier entry, its owner, overwritten as it is read
        _hop_columns(counts, np.arange(counts.shape[0]), rows)
        count, bad = _relabel_keyed(
            nbrs, rows, rows, dst_tree, 0, m, keys, vals, slots, nodes, batch, count, num_nodes
        )
    _hop_columns(counts, dst_local, cols)
    return rows, cols, count, bad


class Relabeler:
    """Global → local node ids for one sample, reused across batches (reset in O(#touched)).

    Non-disjoint: a dense O(N) map keyed by node. Disjoint: an open-addressing table keyed by
    (seed batch id, node), so each seed's subgraph gets its own copy of a shared node.
    """

    def __init__(self, num_nodes: int, disjoint: bool = False) -> None:
        if num_nodes < 0:
            raise ValueError(f"num_nodes must be >= 0 (got {num_nodes})")
        self.num_nodes = int(num_nodes)
        self.disjoint = bool(disjoint)
        self._map = np.full(0 if disjoint else num_nodes, -1, np.int64)
        self._nodes = np.empty(1024, np.int64)
        self._batch = np.empty(1024 if disjoint else 0, np.int64)
        self._slots = np.empty(1024 if disjoint else 0, np.int64)
        self._keys, self._vals = _build_table(16, self._nodes, self._batch, 0, 1, self._slots)
        self._count = 0

    @property
    def nodes(self) -> np.ndarray:
        """Global ids in local-id order (a view; copy it before the next `reset`)."""
        return self._nodes[: self._count]

    @property
    def batch(self) -> np.ndarray | None:
        """Seed batch id per local id (disjoint mode), else None."""
        return self._batch[: self._count] if self.disjoint else None

    def __len__(self) -> int:
        return self._count

    def _reserve(self, extra: int) -> None:
        need = self._count + extra
        self._nodes = _grow(self._nodes, need)
        if self.disjoint:
            self._batch = _grow(self._batch, need)
            self._slots = _grow(self._slots, need)
            if 2 * need > self._keys.shape[0]:
                self._keys, self._vals = _build_table(
                    need, self._nodes, self._batch, self._count, self.num_nodes, self._slots
                )

    def _check(self, nodes: np.ndarray) -> None:
        if nodes.size and (nodes.min() < 0 or nodes.max() >= self.num_nodes):
            raise ValueError(
                f"node ids must lie in [0, {self.num_nodes}) (got [{nodes.min()}, {nodes.max()}])"
            )

    def add(self, nodes, batch=None) -> np.ndarray:
        """Local id of every input; unseen nodes get new consecutive ids in first-seen order."""
        nodes = as_index_array(nodes, "nodes")
        self._check(nodes)
        self._reserve(nodes.shape[0])
        if not self.disjoint:
            local, self._count = _add_dense(self._map, self._nodes, self._count, nodes, False)
            return local
        if batch is None:
            raise ValueError("a disjoint Relabeler needs `batch` (seed batch id per node) in add()")
        batch = as_index_array(batch, "batch")
        if batch.shape != nodes.shape:
            raise ValueError(f"batch has shape {batch.shape} but nodes has {nodes.shape}")
        n = nodes.shape[0]
        local = np.empty(n, np.int64)
        self._count, _ = _relabel_keyed(
            nodes,
            local,
            np.arange(n),
            batch,
            0,
            n,
            self._keys,
            self._vals,
            self._slots,
            self._nodes,
            self._batch,
            self._count,
            self.num_nodes,
        )
        return local

    def add_hop(
        self,
        nbrs: np.ndarray,
        counts: np.ndarray,
        dst_local: np.ndarray,
        dst_tree: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """A hop's edges in local ids, `(rows, cols)`, in one pass: `nbrs` holds `counts[i]`
        neighbours of frontier entry i in turn, whose local id is `dst_local[i]` (its seed's
        tree `dst_tree[i]` when disjoint; ignored otherwise). Equals `add(nbrs, repeated trees)`
        beside `np.repeat(dst_local, counts)`, without the repeats or a second pass."""
        nbrs = as_index_array(nbrs, "nbrs")
        counts, dst_local = np.asarray(counts, np.int64), np.asarray(dst_local, np.int64)
        tree = (
            np.asarray(dst_tree, np.int64) if self.disjoint and dst_tree is not None else _NO_TREE
        )
        if counts.shape != dst_local.shape or (self.disjoint and tree.shape != counts.shape):
            raise ValueError(
                f"add_hop: {counts.shape[0]} counts, {dst_local.shape[0]} local ids and "
                f"{tree.shape[0]} trees (disjoint: {self.disjoint}); pass one per frontier entry"
            )
        self._reserve(nbrs.shape[0])
        rows, cols, self._count, bad = _add_hop(
            self._map, self._keys, self._vals, self._slots, self._nodes, self._batch,
            self._count, nbrs, counts, dst_local, tree, self.num_nodes,
        )  # fmt: skip
        if bad == -2:
            raise ValueError(
                f"add_hop: counts sum to {int(counts.sum())} for {nbrs.shape[0]} neighbours"
            )
        if bad >= 0:  # the nodes added before it stay counted, so `reset` clears them
            self._check(nbrs)  # raises, naming the range
        return rows, cols

    def fill(self, seeds) -> np.ndarray:
        """Add seeds the PyG way: every seed gets its own local id, duplicates included
        (lookups of a duplicated node resolve to its first copy); disjoint: batch i = seed i."""
        seeds = as_index_array(seeds, "seeds")
        if self.disjoint:
            return self.add(seeds, np.arange(seeds.shape[0], dtype=np.int64))
        self._check(seeds)
        self._reserve(seeds.shape[0])
        local, self._count = _add_dense(self._map, self._nodes, self._count, seeds, True)
        return local

    def reset(self) -> None:
        if self.disjoint:
            self._keys[self._slots[: self._count]] = -1
        else:
            self._map[self._nodes[: self._count]] = -1
        self._count = 0


# Fused multi-hop ##################################################################################


@njit(cache=True, nogil=True)
def _init_seeds(seeds, disjoint, nmap, num_nodes, nodes):
    b = seeds.shape[0]
    nodes = _grow(nodes, max(16, 4 * b))
    nodes[:b] = seeds
    batch = np.empty(nodes.shape[0] if disjoint else 0, np.int64)
    slots = np.empty(batch.shape[0], np.int64)
    if disjoint:
        batch[:b] = np.arange(b)
        keys, vals = _build_table(2 * b, nodes, batch, b, num_nodes, slots)
    else:
        keys, vals = _build_table(0, nodes, batch, 0, num_nodes, slots)
        for i in range(b):
            if nmap[seeds[i]] < 0:
                nmap[seeds[i]] = i
    return nodes, batch, slots, keys, vals


@njit(cache=True, nogil=True)
def _sample_frontier(
    colptr,
    row,
    nodes,
    batch,
    begin,
    end,
    k,
    replace,
    hseed,
    disjoint,
    has_time,
    node_time,
    seed_time,
    last,
    rows,
    cols,
    epos,
    n_edges,
    buf,
    map_perm,
    perm,
):
    """Sample nodes[begin:end] into edge slots from n_edges on: epos (or edge ids), global
    neighbour ids in rows, frontier local ids in cols. Returns the new edge count."""
    first = n_edges
    for i in range(begin, end):
        v = nodes[i]
        c = _sample_one(
            colptr,
            row,
            v,
            k,
            replace,
            _entry_state(hseed, v),
            has_time,
            node_time,
            seed_time,
            batch[i] if disjoint else 0,
            last,
            epos,
            n_edges,
            buf,
        )
        cols[n_edges : n_edges + c] = i
        n_edges += c
    for j in range(first, n_edges):  # a separate pass: independent loads overlap
        p = epos[j]
        rows[j] = row[p]
        if map_perm:
            epos[j] = perm[p]
    return n_edges


@njit(cache=True, nogil=True)
def _neighbor_sample(
    colptr,
    row,
    seeds,
    fanouts,
    hop_seeds,
    replace,
    disjoint,
    has_time,
    node_time,
    seed_time,
    last,
    nmap,
    map_perm,
    perm,
    nodes,
    rows,
    cols,
    epos,
):
    """The fused sample into the workspace arrays nodes/rows/cols/epos (grown when too small;
    the arrays used are returned with the counts)."""
    num_nodes = colptr.shape[0] - 1
    nodes, batch, slots, keys, vals = _init_seeds(seeds, disjoint, nmap, num_nodes, nodes)
    num_hops = fanouts.shape[0]
    nsn = np.zeros(num_hops + 1, np.int64)
    nse = np.zeros(num_hops, np.int64)
    count = seeds.shape[0]
    nsn[0] = count
    n_edges = 0
    begin, end = 0, count
    for h in range(num_hops):
        k = fanouts[h]
        total, maxdeg = _hop_bound(colptr, nodes, begin, end, k, replace)
        rows, cols, epos = (
            _grow(rows, n_edges + total),
            _grow(cols, n_edges + total),
            _grow(epos, n_edges + total),
        )
        nodes = _grow(nodes, count + total)
        if disjoint:
            batch, slots = _grow(batch, count + total), _grow(slots, count + total)
            if 2 * (count + total) > keys.shape[0]:
                keys, vals = _build_table(count + total, nodes, batch, count, num_nodes, slots)
        first_edge = n_edges
        buf = _scratch(maxdeg, k, replace, has_time)
        n_edges = _sample_frontier(
            colptr,
            row,
            nodes,
            batch,
            begin,
            end,
            k,
            replace,
            hop_seeds[h],
            disjoint,
            has_time,
            node_time,
            seed_time,
            last,
            rows,
            cols,
            epos,
            n_edges,
            buf,
            map_perm,
            perm,
        )
        if disjoint:  # in place; the CSC's ids lie in range, so nothing stops early
            count, _ = _relabel_keyed(
                rows,
                rows,
                cols,
                batch,
                first_edge,
                n_edges,
                keys,
                vals,
                slots,
                nodes,
                batch,
                count,
                num_nodes,
            )
        else:
            count, _ = _relabel_dense(
                rows, rows, first_edge, n_edges, nmap, nodes, count, num_nodes
            )
        nsn[h + 1] = count - end
        nse[h] = n_edges - first_edge
        begin, end = end, count
    if not disjoint:
        for i in range(count):
            nmap[nodes[i]] = -1
    out_batch = batch[:count].copy() if disjoint else batch[:0].copy()
    return nodes, rows, cols, epos, count, n_edges, nsn, nse, out_batch


@njit(cache=True, nogil=True)
def _induced(colptr, row, dst_nodes, src_nodes, smap):
    """All CSC edges from a node of `src_nodes` into a node of `dst_nodes` (local ids)."""
    for i in range(src_nodes.shape[0]):
        if smap[src_nodes[i]] < 0:
            smap[src_nodes[i]] = i
    n = 0
    for v in dst_nodes:
        for p in range(colptr[v], colptr[v + 1]):
            if smap[row[p]] >= 0:
                n += 1
    rows = np.empty(n, np.int64)
    cols = np.empty(n, np.int64)
    epos = np.empty(n, np.int64)
    n = 0
    for i in range(dst_nodes.shape[0]):
        v = dst_nodes[i]
        for p in range(colptr[v], colptr[v + 1]):
            loc = smap[row[p]]
            if loc >= 0:
                rows[n], cols[n], epos[n] = loc, i, p
                n += 1
    for s in src_nodes:
        smap[s] = -1
    return rows, cols, epos


# Python entry points ##############################################################################


def _u64(seed: int) -> np.uint64:
    return np.uint64(int(seed) & _MASK)


def _check_nodes(nodes: np.ndarray, colptr: np.ndarray, name: str) -> None:
    n = colptr.shape[0] - 1
    if nodes.size and (nodes.min() < 0 or nodes.max() >= n):
        raise ValueError(
            f"{name} holds node ids in [{nodes.min()}, {nodes.max()}] but the CSC has {n} "
            "columns; ids must lie in [0, num_nodes)"
        )


def _time_args(node_time, seed_time, n: int, what: str):
    """(has_time, node_time, seed_time) as numba-friendly arrays of one dtype."""
    if node_time is None:
        empty = np.empty(0, np.int64)
        return False, empty, empty
    if seed_time is None:
        raise ValueError(f"node_time is given but seed_time is None; pass one time per {what}")
    nt = np.asarray(node_time.numpy() if hasattr(node_time, "numpy") else node_time)
    dtype = np.float64 if nt.dtype.kind == "f" else np.int64
    nt = np.ascontiguousarray(nt, dtype=dtype)
    st = np.asarray(seed_time.numpy() if hasattr(seed_time, "numpy") else seed_time)
    st = np.ascontiguousarray(st, dtype=dtype)
    if st.shape != (n,):
        raise ValueError(f"seed_time must hold one time per {what} ({n}); got shape {st.shape}")
    return True, nt, st


def _check_strategy(strategy: str) -> bool:
    if strategy not in STRATEGIES:
        raise ValueError(f"temporal strategy must be one of {STRATEGIES} (got {strategy!r})")
    return strategy == "last"


def sample_hop(
    colptr: np.ndarray,
    row: np.ndarray,
    frontier,
    k: int,
    replace: bool = False,
    seed: int = 0,
    node_time=None,
    seed_time=None,
    strategy: str = "uniform",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Up to k in-neighbours per frontier node: `(nbrs, epos, counts)`, in frontier order.

    k < 0 takes all. `seed` is this hop's seed (the fused sampler uses `hop_seed(seed, hop)`).
    With `node_time`, only neighbours with node_time[nbr] <= seed_time[i] qualify.
    """
    last = _check_strategy(strategy)
    frontier = as_index_array(frontier, "frontier")
    _check_nodes(frontier, colptr, "frontier")
    has_time, nt, st = _time_args(node_time, seed_time, frontier.shape[0], "frontier node")
    return _sample_hop(
        colptr, row, frontier, int(k), bool(replace), _u64(seed), has_time, nt, st, last
    )


class Workspace:
    """The arrays one thread's fused samples are built in, kept (and grown) across calls, so a
    batch writes into memory already paged in; `neighbor_sample(..., workspace=)`."""

    def __init__(self) -> None:
        self.nodes, self.rows, self.cols, self.epos = (np.empty(16, np.int64) for _ in range(4))


def neighbor_sample(
    colptr: np.ndarray,
    row: np.ndarray,
    seeds,
    num_neighbors: list[int],
    replace: bool = False,
    seed: int = 0,
    disjoint: bool = False,
    node_time=None,
    seed_time=None,
    temporal_strategy: str = "uniform",
    scratch: np.ndarray | None = None,
    perm: np.ndarray | None = None,
    workspace: Workspace | None = None,
):
    """Fused multi-hop sample with PyG's layout (seeds first, then each hop's new nodes).

    Returns `(node, row_local, col_local, epos, num_sampled_nodes, num_sampled_edges, batch)`;
    edge j points from the neighbour `row_local[j]` to the frontier node `col_local[j]`. Duplicate
    seeds each keep their own slot (and are each sampled), as in PyG; a neighbour equal to a
    duplicated seed maps to its first copy. Temporal sampling is always disjoint (as in PyG). `scratch` is an optional int64[N] array of -1 that
    is reused across calls (left as -1 on return); one per thread. With `perm` (from `to_csc`),
    the 4th output holds original edge ids `perm[epos]` instead of CSC positions. With a
    `workspace` (one per thread), node/row/col/edge are views into it, valid until its next use.
    """
    last = _check_strategy(temporal_strategy)
    seeds = as_index_array(seeds, "seeds")
    _check_nodes(seeds, colptr, "seeds")
    fanouts = np.asarray(list(num_neighbors), dtype=np.int64)
    has_time, nt, st = _time_args(node_time, seed_time, seeds.shape[0], "seed")
    disjoint = bool(disjoint or has_time)
    num_nodes = colptr.shape[0] - 1
    if disjoint:
        nmap = np.empty(0, np.int64)
    elif scratch is None:
        nmap = np.full(num_nodes, -1, np.int64)
    else:
        nmap = scratch
        if nmap.shape != (num_nodes,):
            raise ValueError(f"scratch must have shape ({num_nodes},) (got {nmap.shape})")
    hop_seeds = np.array([hop_seed(seed, h) for h in range(len(fanouts))], dtype=np.uint64)
    ws = Workspace() if workspace is None else workspace
    ws.nodes, ws.rows, ws.cols, ws.epos, count, n_edges, nsn, nse, batch = _neighbor_sample(
        colptr,
        row,
        seeds,
        fanouts,
        hop_seeds,
        bool(replace),
        disjoint,
        has_time,
        nt,
        st,
        last,
        nmap,
        perm is not None,
        np.empty(0, np.int64) if perm is None else perm,
        ws.nodes,
        ws.rows,
        ws.cols,
        ws.epos,
    )
    out = [ws.nodes[:count], ws.rows[:n_edges], ws.cols[:n_edges], ws.epos[:n_edges]]
    if workspace is None:  # a workspace of its own: give back exactly sized arrays
        out = [a.copy() for a in out]
    return (*out, nsn.tolist(), nse.tolist(), batch if disjoint else None)


def induced_edges(
    colptr: np.ndarray,
    row: np.ndarray,
    dst_nodes: np.ndarray,
    src_nodes: np.ndarray,
    scratch: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every edge src → dst with both ends in the given node sets: `(row_local, col_local, epos)`.

    `scratch` is an optional int64 array of -1 sized to the source node count (left as -1).
    """
    dst_nodes = as_index_array(dst_nodes, "dst_nodes")
    src_nodes = as_index_array(src_nodes, "src_nodes")
    _check_nodes(dst_nodes, colptr, "dst_nodes")
    if scratch is None:
        top = int(row.max()) + 1 if row.size else 0
        top = max(top, int(src_nodes.max()) + 1 if src_nodes.size else 0)
        scratch = np.full(top, -1, np.int64)
    return _induced(colptr, row, dst_nodes, src_nodes, scratch)


_WARM = False


def warmup() -> None:
    """Compile (or load from numba's on-disk cache) every kernel variant the samplers use."""
    global _WARM
    if _WARM:
        return
    colptr, row = np.array([0, 1, 3, 3], np.int64), np.array([1, 0, 2], np.int64)
    seeds, t = np.array([0, 1], np.int64), np.zeros(3, np.int64)
    for nt in (None, t):  # float times compile on first use (then cached on disk)
        st = None if nt is None else nt[:2]
        for strategy in STRATEGIES:
            sample_hop(colptr, row, seeds, 1, node_time=nt, seed_time=st, strategy=strategy)
            for dis in (False, True):
                neighbor_sample(
                    colptr,
                    row,
                    seeds,
                    [2, -1],
                    disjoint=dis,
                    node_time=nt,
                    seed_time=st,
                    temporal_strategy=strategy,
                )
    for dis in (False, True):
        rel = Relabeler(3, dis)
        rel.fill(seeds)
        rel.add(seeds, seeds if dis else None)
        rel.add_hop(seeds, np.ones(2, np.int64), seeds, seeds)
        rel.reset()
    induced_edges(colptr, row, seeds, seeds)
    _WARM = True
