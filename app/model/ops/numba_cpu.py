"""The CPU kernels: numba loops over numpy views of CPU tensors.

Single-threaded on purpose: numba's parallel (OpenMP) layer next to torch's own OpenMP runtime
intermittently hung DDP processes; one thread per trainer process is also what the launcher
gives each trainer on a CPU node. Callers go through `app.model.ops`, which sends tensors on
other devices (or every tensor, with `DISTGNN_KERNELS=torch`) to `torch_any` instead.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from torch import Tensor

from app.model.ops.prefetch import prefetch

PREFETCH_AHEAD = 16  # edges ahead whose source row `_csr_mean` asks the cache for
LINE_FLOATS = 16  # float32 values per 64-byte cache line
SUM_EDGES = 4  # source rows `_csr_mean` sums before adding them to the output (body written for 4)


@numba.njit(nogil=True, cache=True)
def _csr_spmm(crow, col, val, h, out):  # pragma: no cover - compiled
    """out[i] += sum_j val[j] * h[col[j]] over row i's entries."""
    for i in range(out.shape[0]):
        for j in range(crow[i], crow[i + 1]):
            c, v = col[j], val[j]
            for f in range(h.shape[1]):
                out[i, f] += v * h[c, f]


@numba.njit(nogil=True, cache=True)
def _csr_mean(crow, col, head, tail, out):  # pragma: no cover - compiled
    """out[i] = mean over row i's entries j of source row col[j] of [head; tail] (0 for none):
    the mean aggregation without per-edge weights, writing every output row (`out` may be
    uninitialised). The sources are two arrays so that a rank's own rows are read where they
    lie (e.g. memory-mapped features) and only its fetched rows need a buffer. Source rows are
    random reads from large tables: each edge prefetches the row `PREFETCH_AHEAD` edges on.
    `SUM_EDGES` rows are summed before they are added to the output row, which is then loaded
    and stored a quarter as often."""
    width, n_head = out.shape[1], head.shape[0]
    end = crow[out.shape[0]]
    for i in range(out.shape[0]):
        row = out[i]
        row[:] = 0
        j, stop = crow[i], crow[i + 1]
        while j < stop:
            for k in range(SUM_EDGES):
                if j + PREFETCH_AHEAD + k < end:
                    ahead = col[j + PREFETCH_AHEAD + k]
                    for f in range(0, width, LINE_FLOATS):
                        if ahead < n_head:
                            prefetch(head, ahead, f)
                        else:
                            prefetch(tail, ahead - n_head, f)
            if j + SUM_EDGES <= stop:
                c0, c1, c2, c3 = col[j], col[j + 1], col[j + 2], col[j + 3]
                a = head[c0] if c0 < n_head else tail[c0 - n_head]
                b = head[c1] if c1 < n_head else tail[c1 - n_head]
                c = head[c2] if c2 < n_head else tail[c2 - n_head]
                d = head[c3] if c3 < n_head else tail[c3 - n_head]
                for f in range(width):
                    row[f] += (a[f] + b[f]) + (c[f] + d[f])
                j += SUM_EDGES
            else:
                c0 = col[j]
                a = head[c0] if c0 < n_head else tail[c0 - n_head]
                for f in range(width):
                    row[f] += a[f]
                j += 1
        if stop > crow[i]:
            scale = np.float32(1.0) / np.float32(stop - crow[i])
            for f in range(width):
                row[f] *= scale


@numba.njit(nogil=True, cache=True)
def _counting_sort(keys, n):  # pragma: no cover - compiled
    """Stable permutation sorting `keys` (ints in [0, n)) and the CSR pointer of the groups."""
    ptr = np.zeros(n + 1, np.int64)
    for k in keys:
        ptr[k + 1] += 1
    for i in range(n):
        ptr[i + 1] += ptr[i]
    fill = ptr[:-1].copy()
    perm = np.empty(keys.shape[0], np.int64)
    for j in range(keys.shape[0]):
        perm[fill[keys[j]]] = j
        fill[keys[j]] += 1
    return perm, ptr


@numba.njit(nogil=True, cache=True)
def _in_csr(src, dst, num_src, crow, col):  # pragma: no cover - compiled
    """`crow` (zeros [n + 1] on entry) and `col` of the edges `src -> dst` grouped by
    destination, each node's sources in edge order (a stable counting sort written straight
    into `col`, whatever its dtype: no permutation, no gather). Returns the first edge with
    an endpoint out of range (nothing written then), or -1."""
    n = crow.shape[0] - 1
    for e in range(dst.shape[0]):
        d, s = dst[e], src[e]
        if d < 0 or d >= n or s < 0 or s >= num_src:
            return e
        crow[d + 1] += 1
    for i in range(n):
        crow[i + 1] += crow[i]
    fill = crow[:-1].copy()
    for e in range(dst.shape[0]):
        d = dst[e]
        col[fill[d]] = src[e]
        fill[d] += 1
    return -1


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


def _np(t: Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def spmm(crow: Tensor, col: Tensor, val: Tensor, h: Tensor, n_rows: int) -> Tensor:
    out = torch.zeros(n_rows, h.size(1), dtype=h.dtype)
    if col.numel():
        _csr_spmm(crow.numpy(), col.numpy(), val.numpy(), _np(h), out.numpy())
    return out


def csr_mean(crow: Tensor, col: Tensor, head: Tensor, tail: Tensor, out: Tensor) -> Tensor:
    _csr_mean(crow.numpy(), col.numpy(), _np(head), _np(tail), out.numpy())
    return out


def group_ptr(keys: Tensor, n: int) -> Tensor:
    ptr = torch.zeros(n + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(keys, minlength=n), 0, out=ptr[1:])
    return ptr


def group_by(keys: Tensor, n: int) -> tuple[Tensor, Tensor]:
    perm, ptr = _counting_sort(keys.numpy(), n)
    return torch.from_numpy(perm), torch.from_numpy(ptr)


def dropout(x: Tensor, p: float) -> Tensor:
    """Inverted dropout with a byte-resolution keep probability (0 < p < 1).

    `F.dropout` draws one Bernoulli float per element, which dominated the step time on CPU
    (about a third of a SAGE step). Here one random byte per element is drawn by numpy from a
    seed taken from torch's global generator (so `torch.manual_seed` keeps runs reproducible);
    `p` is rounded to a multiple of 1/256 and the scale uses the rounded value, so the layer
    stays unbiased.
    """
    threshold = min(255, max(1, round(p * 256)))
    seed = int(torch.randint(0, 2**62, ()).item())
    raw = np.frombuffer(np.random.default_rng(seed).bytes(x.numel()), dtype=np.uint8)
    keep = torch.from_numpy(raw >= threshold).view(x.shape)
    return x * keep.to(x.dtype).mul_(256.0 / (256 - threshold))


def mark_ids(ids: Tensor, flags: Tensor) -> int:
    return int(_mark(ids.numpy(), flags.numpy()))


def in_csr(src: Tensor, dst: Tensor, num_src: int, crow: Tensor, col: Tensor) -> int:
    return int(_in_csr(src.numpy(), dst.numpy(), num_src, crow.numpy(), col.numpy()))


def row_argmax(rows: Tensor) -> Tensor:
    out = np.empty(rows.size(0), np.int64)
    _argmax(rows.detach().numpy(), out)
    return torch.from_numpy(out)


_WARM = False


def warm() -> None:
    """Load (or compile) the kernels for the index dtypes batches and layer-wise views use, so
    a job's first training step does not pay for it (once per process)."""
    global _WARM
    if _WARM:
        return
    h, out = np.ones((2, 1), np.float32), np.zeros((1, 1), np.float32)
    for index in (np.int64, np.int32):
        crow, col = np.array([0, 2], index), np.array([0, 1], index)
        _csr_spmm(crow, col, np.ones(2, np.float32), h, out)
        _csr_mean(crow, col, h, h[:0], out)
        _mark(col, np.zeros(2, np.bool_))
        _in_csr(np.array([1, 0], np.int64), np.array([0, 0], np.int64), 2, np.zeros(3, np.int64),
                np.empty(2, index))  # fmt: skip
    _counting_sort(np.array([1, 0], np.int64), 2)
    rows = np.ones((2, 2), np.float32)
    for view in (rows, rows[:, :1]):  # whole rows, and the leading columns of wider ones
        _argmax(view, np.empty(2, np.int64))
    _WARM = True
