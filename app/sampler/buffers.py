"""Output buffers a loader reuses across batches: feature rows gathered into memory already paged in.

A batch's node attributes are tens of MB (fan-out [15, 10, 5], batch 1024, 100 float32
features: ~60 MB). Gathered into fresh memory, every 4 KB page faults and is zeroed by the kernel
before the gather writes it, which costs about as much CPU as the gather itself; glibc serves
blocks that large by `mmap`, fresh each time, whatever `mallopt` says. A `BufferPool` keeps a few
buffers and hands one out again only once no batch holds any view of it, so a loader's batches
after the first few write into pages already mapped, and a batch the consumer keeps is never
overwritten.

How "no batch holds it" is known: a buffer is a numpy array the pool owns; a batch's tensor is
`torch.from_numpy` of a slice of it, and that tensor (and every torch view of it) keeps the slice,
which keeps the buffer, referenced. So the buffer's reference count is the pool's own while
nothing else holds it.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import torch
from torch import Tensor

_HEADROOM = 1.25  # a new buffer's rows: this times the batch's, so later batches fit


def _numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    """The numpy dtype of a torch dtype, or None where numpy has none (bfloat16)."""
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError:
        return None


class BufferPool:
    """Reusable row buffers per (name, dtype, row shape); at most `keep` of each are kept."""

    def __init__(self, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"a BufferPool keeps at least 1 buffer per kind (got keep={keep})")
        self.keep = keep
        self._buffers: dict[tuple, list[np.ndarray]] = {}
        self._lock = threading.Lock()

    def rows(
        self, name: str, num_rows: int, row_shape: tuple[int, ...], dtype: torch.dtype
    ) -> Tensor:
        """An uninitialised `[num_rows, *row_shape]` tensor in a buffer no batch holds; `name`
        (the attribute) keeps buffers of different sizes apart."""
        np_dtype = _numpy_dtype(dtype)
        if np_dtype is None:
            return torch.empty((num_rows, *row_shape), dtype=dtype)
        with self._lock:
            buf = self._free((name, np_dtype, row_shape), num_rows)
        return torch.from_numpy(buf[:num_rows])

    def whole(self, name: str, min_rows: int, dtype: type[np.generic]) -> np.ndarray:
        """A whole 1-D buffer of at least `min_rows` that no batch holds, for a kernel that learns
        its output's size only while writing it: the caller hands out views of its prefix."""
        with self._lock:
            return self._free((name, np.dtype(dtype), ()), min_rows)

    def _free(self, kind: tuple, num_rows: int) -> np.ndarray:
        """A buffer of `kind` with room for `num_rows` that nothing else references."""
        pool = self._buffers.setdefault(kind, [])
        for i in range(len(pool)):
            # references: the pool's list and getrefcount's argument; any more is a batch's view
            if sys.getrefcount(pool[i]) <= 2:
                if pool[i].shape[0] >= num_rows:
                    return pool[i]
                del pool[i]  # too small for this batch: replaced below
                break
        buf = np.empty((int(num_rows * _HEADROOM) + 1, *kind[2]), kind[1])
        if len(pool) < self.keep:
            pool.append(buf)
        return buf
