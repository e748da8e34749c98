"""The arithmetic under the models and layer-wise inference: one entry per operation, a kernel
per device (as PyG's `utils/_spmm.py`).

Each entry looks at its tensors' device: CPU tensors go to the numba kernels (`numba_cpu`),
tensors on any other device to torch (`torch_any`: cuSPARSE CSR products, torch's sort and
scatter). `DISTGNN_KERNELS` overrides the choice: `torch` sends CPU tensors to the torch path
too (how CPU-only CI proves the GPU path's arithmetic), `numba` insists on the CPU kernels (a
tensor elsewhere is then an error); unset or empty, the device decides. The device itself is
the task's (`train.device`): models and batches are put there once, and every operation below
follows its inputs.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import Tensor

from app.config import KERNELS_ENV, kernels_forced
from app.model.ops import numba_cpu, torch_any
from app.model.ops.numba_cpu import LINE_FLOATS

__all__ = [
    "KERNELS_ENV",
    "LINE_FLOATS",
    "csr_mean",
    "dropout",
    "group_by",
    "group_ptr",
    "sort_groups",
    "in_csr",
    "mark_ids",
    "row_argmax",
    "spmm",
    "uses_numba",
    "warm",
]


def uses_numba(t: Tensor) -> bool:
    """Whether an operation on `t` runs the numba kernels (see the module docstring)."""
    mode = kernels_forced()
    if t.device.type == "cpu":
        return mode != "torch"
    if mode == "numba":
        raise ValueError(
            f"{KERNELS_ENV}=numba runs CPU kernels but a tensor is on {t.device}: unset "
            f"{KERNELS_ENV} or use train.device=cpu"
        )
    return False


def _ops(t: Tensor) -> ModuleType:
    """The kernel module for tensors like `t`."""
    return numba_cpu if uses_numba(t) else torch_any


def spmm(crow: Tensor, col: Tensor, val: Tensor, h: Tensor, n_rows: int) -> Tensor:
    """`A @ h` for the CSR `A` = (`crow` [n_rows + 1], `col`, `val`) over `h`'s rows (float32);
    no gradient (`app.model.gnn.CSRMatmul` adds it)."""
    return _ops(h).spmm(crow, col, val, h, n_rows)


def csr_mean(crow: Tensor, col: Tensor, head: Tensor, tail: Tensor, out: Tensor) -> Tensor:
    """`out[i]` = the mean of rows `col[crow[i]:crow[i + 1]]` of `[head; tail]` (0 for a row
    without entries), written into `out` (any contents) and returned."""
    return _ops(head).csr_mean(crow, col, head, tail, out)


def group_by(keys: Tensor, n: int) -> tuple[Tensor | None, Tensor]:
    """(stable sorting permutation, or None if `keys` is already sorted; CSR pointer [n + 1]
    of the groups) for integer `keys` in [0, n)."""
    if keys.numel() < 2 or bool((keys[1:] >= keys[:-1]).all()):
        return None, group_ptr(keys, n)
    return _ops(keys).group_by(keys, n)


def group_ptr(keys: Tensor, n: int) -> Tensor:
    """The CSR pointer [n + 1] of the groups of integer `keys` in [0, n), in any order."""
    return _ops(keys).group_ptr(keys, n)


def sort_groups(keys: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """`group_by` without its check for keys already sorted (on a GPU a read-back), for
    keys known to be unsorted or checked by the caller: always a permutation."""
    return _ops(keys).group_by(keys, n)


def in_csr(edge_index: Tensor, num_src: int, num_dst: int) -> tuple[Tensor, Tensor]:
    """(crow [num_dst + 1] int64, col) of the edges `edge_index[0] -> edge_index[1]` grouped
    by destination, each node's sources in edge order (`group_by`'s stable order), `col` in
    int32 where source ids fit (half the bytes; every consumer of a CSR takes either). One
    pass writes `col` (no permutation nor gather of every edge); an id out of range is an
    error that names it."""
    src, dst = edge_index[0], edge_index[1]
    crow = torch.zeros(num_dst + 1, dtype=torch.int64, device=edge_index.device)
    kind = torch.int32 if num_src < 2**31 else torch.int64
    col = torch.empty(src.numel(), dtype=kind, device=edge_index.device)
    bad = _ops(edge_index).in_csr(src, dst, num_src, crow, col)
    if bad >= 0:
        raise IndexError(
            f"edge {bad} ({int(src[bad])} -> {int(dst[bad])}) out of range: sources "
            f"[0, {num_src}), destinations [0, {num_dst})"
        )
    return crow, col


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout (identity in eval mode or for p <= 0; zeros for p >= 1)."""
    if not training or p <= 0.0:
        return x
    if p >= 1.0:
        return x.new_zeros(x.shape)
    return _ops(x).dropout(x, p)


def mark_ids(ids: Tensor, flags: Tensor) -> None:
    """`flags[ids] = True` (`flags` bool; `ids` any integer dtype, no int64 copy on the CPU).
    An id out of range is an error that names it (a corrupt partition), not a write past the
    array."""
    bad = _ops(flags).mark_ids(ids, flags)
    if bad >= 0:
        raise IndexError(f"node id {int(ids[bad])} out of range [0, {flags.numel()})")


def row_argmax(rows: Tensor) -> Tensor:
    """`rows.argmax(dim=-1)` of a 2-D float tensor whose rows may be strided (a view of the
    leading columns of wider rows), without copying it on the CPU."""
    if rows.dim() != 2 or not rows.size(1):
        raise ValueError(f"expected [n, k > 0] rows, got {list(rows.shape)}")
    return _ops(rows).row_argmax(rows)


def warm() -> None:
    """Load (or compile) the CPU kernels once per process, unless torch is forced."""
    if kernels_forced() != "torch":
        numba_cpu.warm()
