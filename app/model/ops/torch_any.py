"""The same operations in torch, on any device (cuSPARSE CSR products on a GPU).

Results equal the numba kernels' up to float rounding (summation order); `dropout` draws its
mask with torch's generator, so its mask differs from the CPU kernel's for the same seed.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor


def _sparse(crow: Tensor, col: Tensor, val: Tensor, n_cols: int) -> Tensor:
    """`[len(crow) - 1, n_cols]` CSR tensor (torch needs one index dtype for both arrays)."""
    col = col if col.dtype == crow.dtype else col.to(crow.dtype)
    with warnings.catch_warnings():  # "sparse CSR support is in beta": once per process, noise
        warnings.simplefilter("ignore", UserWarning)
        size = (crow.numel() - 1, n_cols)
        return torch.sparse_csr_tensor(crow, col, val, size=size, check_invariants=False)


def spmm(crow: Tensor, col: Tensor, val: Tensor, h: Tensor, n_rows: int) -> Tensor:
    if not col.numel():
        return torch.zeros(n_rows, h.size(1), dtype=h.dtype, device=h.device)
    return _sparse(crow[: n_rows + 1], col, val.to(h.dtype), h.size(0)) @ h.detach()


def csr_mean(crow: Tensor, col: Tensor, head: Tensor, tail: Tensor, out: Tensor) -> Tensor:
    degree = crow[1:] - crow[:-1]
    if not col.numel():
        return out.zero_()
    src = head if not tail.numel() else torch.cat([head, tail])
    rows = torch.repeat_interleave(degree, output_size=col.numel())  # sized: no read-back
    val = (1.0 / degree.clamp(min=1).to(src.dtype))[rows]
    return out.copy_(_sparse(crow, col, val, src.size(0)) @ src)


def group_ptr(keys: Tensor, n: int) -> Tensor:
    """The CSR pointer [n + 1] of the groups of `keys` (any order): counted with a scatter-add,
    not `bincount`, which on a GPU reads the largest key back to size its output."""
    ptr = torch.zeros(n + 1, dtype=torch.int64, device=keys.device)
    ptr[1:].scatter_add_(0, keys.long(), torch.ones_like(keys, dtype=torch.int64))
    return ptr.cumsum_(0)


def group_by(keys: Tensor, n: int) -> tuple[Tensor, Tensor]:
    return torch.argsort(keys, stable=True), group_ptr(keys, n)


def dropout(x: Tensor, p: float) -> Tensor:
    return F.dropout(x, p, training=True)


def in_csr(src: Tensor, dst: Tensor, num_src: int, crow: Tensor, col: Tensor) -> int:
    n = crow.numel() - 1
    bad = ((dst < 0) | (dst >= n) | (src < 0) | (src >= num_src)).nonzero()
    if bad.numel():
        return int(bad[0])
    perm, ptr = group_by(dst, n)
    crow.copy_(ptr)
    col.copy_(src[perm])
    return -1


def mark_ids(ids: Tensor, flags: Tensor) -> int:
    bad = ((ids < 0) | (ids >= flags.numel())).nonzero()
    if bad.numel():
        first = int(bad[0])
        flags[ids[:first].long()] = True
        return first
    flags[ids.long()] = True
    return -1


def row_argmax(rows: Tensor) -> Tensor:
    return rows.argmax(dim=-1)
