"""Batches from a sampler process to its trainer through a ring of reused shared-memory files.

A sampler process and the trainer it serves are on the same node, so a batch's (large) feature
matrices never go through RPC serialisation: the sampler writes them into a file in /dev/shm and
sends back `ShmArray` handles (file, offset, shape, dtype) that the trainer maps.

Creating, populating and unlinking a fresh file per batch costs a whole new set of pages (page
faults, kernel time) every batch, so the files are REUSED: the trainer's `BatchRing` owns a ring
of slots and names the slot each request must write into; a slot goes back to the ring only when
every tensor of the batch that used it is gone (a `weakref.finalize` on the mapped arrays), so a
batch the trainer still holds is never overwritten. Slots are created on first use (the ring is
`concurrency` in flight + the batch in hand + the previous one still bound to a `for` loop's
variable) and grown, never shrunk, to the largest batch; both sides keep their mappings, so a
steady-state batch maps nothing and faults no page in.

Ownership and cleanup: the files are created by the SAMPLER process and named
`distgnn-<sampler pid>-<slot>`. The sampler removes its own on every exit (`remove_own`), and a
trainer whose sampler died (SIGKILL) removes those of dead processes (`remove_orphans`), as does
the next sampler started on the node.
"""

from __future__ import annotations

import itertools
import mmap
import os
import tempfile
import threading
import weakref
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from app.fsutil import pid_alive
from app.sampler.output import SampledBatch

SHM_DIR = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
PREFIX = "distgnn-"
_GROW = 1 << 20  # slot files grow in whole MiB, with 25 % headroom
_ALIGN = 64
_ring_ids = itertools.count()


@dataclass(frozen=True)
class ShmArray:
    """One array of a batch, left in a ring slot file for the trainer on the same node."""

    path: str
    offset: int
    shape: tuple[int, ...]
    dtype: str

    @property
    def end(self) -> int:
        return self.offset + int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


class _Maps:
    """This process's mappings of slot files, kept across batches and remapped only on growth."""

    def __init__(self) -> None:
        self._maps: dict[str, mmap.mmap] = {}
        self.lock = threading.Lock()
        self.closed = False  # set by `remove_own`: a late request must not create a file

    def get(self, path: str, need: int, create: bool) -> mmap.mmap:
        """A shared, writable mapping of `path` covering at least `need` bytes.

        `create` (sampler): create or grow the file to fit; otherwise (trainer) map the file at
        the size the sampler gave it. A superseded mapping stays valid for the arrays that use it.
        """
        with self.lock:
            mm = self._maps.get(path)
            if mm is not None and len(mm) >= need:
                return mm
            if create and self.closed:
                raise RuntimeError(f"{path}: this sampler process is exiting")
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
            try:
                size = os.fstat(fd).st_size
                if create and size < need:
                    grown = -(-max(need, size + size // 4) // _GROW) * _GROW
                    _write_zeros(fd, size, grown)
                    size = grown
                mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
            finally:
                os.close(fd)
            self._maps[path] = mm
            return mm


def _write_zeros(fd: int, start: int, end: int) -> None:
    """Extend the file to `end` by writing zeros from `start`: ENOSPC now rather than SIGBUS
    later, as `posix_fallocate` would; but pages that were written are mapped by the kernel
    16 per fault (fault-around), where fallocated ones fault one by one (a 21 MB slot: 594
    faults instead of 5,376, and a little faster)."""
    zeros = bytes(_GROW)
    for offset in range(start, end, _GROW):
        os.pwrite(fd, zeros[: end - offset], offset)


_maps = _Maps()


def slot_path(slot: str, pid: int | None = None) -> str:
    """The file of ring slot `slot` written by sampler process `pid` (default: this one)."""
    return str(SHM_DIR / f"{PREFIX}{os.getpid() if pid is None else pid}-{slot}")


class SlotWriter:
    """Sampler side: hands the feature gather its output arrays inside one ring slot, then swaps
    them for `ShmArray` handles in the finished batch (each row is written once, in place)."""

    def __init__(self, slot: str) -> None:
        self.path = slot_path(slot)
        self.used = 0
        self.arrays: dict[int, ShmArray] = {}

    def __call__(self, name: str, shape: tuple, dtype: np.dtype) -> np.ndarray:
        dtype, count = np.dtype(dtype), int(np.prod(shape))
        if count == 0:
            return np.empty(shape, dtype)
        offset = -(-self.used // _ALIGN) * _ALIGN
        self.used = offset + count * dtype.itemsize
        mm = _maps.get(self.path, self.used, create=True)
        arr = np.frombuffer(mm, dtype, count, offset).reshape(shape)
        self.arrays[arr.ctypes.data] = ShmArray(self.path, offset, tuple(shape), dtype.str)
        return arr

    def export(self, batch: SampledBatch) -> SampledBatch:
        """`batch` with every row array written here swapped for its `ShmArray` handle."""
        for table in batch.node_tables():
            for key, value in list(table.items()):
                if isinstance(value, Tensor) and value.data_ptr() in self.arrays:
                    table[key] = self.arrays[value.data_ptr()]
        return batch


class BatchRing:
    """Trainer side: the ring's slots (which are free) and attaching batches written into them.

    `acquire()` names a free slot for the next request (a new one if all are in use); `attach`
    maps a returned batch and frees its slot when the last of its tensors is released.
    """

    def __init__(self) -> None:
        self.tag = f"{os.getpid()}r{next(_ring_ids)}"
        self._free: deque[int] = deque()
        self._lock = threading.Lock()
        self.depth = 0  # slots created so far

    def acquire(self) -> str:
        with self._lock:
            k = self._free.popleft() if self._free else self._new()
        return f"{self.tag}s{k}"

    def _new(self) -> int:
        self.depth += 1
        return self.depth - 1

    def release(self, slot: str) -> None:
        """Give a slot back (its batch is gone, or never used it)."""
        with self._lock:
            self._free.append(int(slot.rsplit("s", 1)[1]))

    def attach(self, batch: SampledBatch, slot: str | None) -> SampledBatch:
        """Replace every `ShmArray` of `batch` by a tensor mapped from its slot (zero-copy)."""
        if slot is None:
            return batch
        held = [0]

        def drop() -> None:
            held[0] -= 1
            if held[0] == 0:
                self.release(slot)

        for table in batch.node_tables():
            for key, value in list(table.items()):
                if isinstance(value, ShmArray):
                    mm = _maps.get(value.path, value.end, create=False)
                    count = int(np.prod(value.shape))
                    arr = np.frombuffer(mm, np.dtype(value.dtype), count, value.offset)
                    arr = arr.reshape(value.shape)
                    held[0] += 1
                    weakref.finalize(arr, drop)
                    table[key] = torch.from_numpy(arr)
        if held[0] == 0:
            self.release(slot)
        return batch


def remove_own() -> None:
    """Delete the slot files this process created (it is exiting; none is created after)."""
    with _maps.lock:
        _maps.closed = True
        for path in SHM_DIR.glob(f"{PREFIX}{os.getpid()}-*"):
            path.unlink(missing_ok=True)


def remove_orphans() -> None:
    """Delete slot files left by dead (e.g. SIGKILLed) sampler processes of this node, and the
    slots of this process's own rings (called by a trainer leaving after a failure)."""
    for path in SHM_DIR.glob(f"{PREFIX}*-*"):
        writer, _, slot = path.name[len(PREFIX) :].partition("-")
        if slot.startswith(f"{os.getpid()}r") or (writer.isdigit() and not pid_alive(int(writer))):
            path.unlink(missing_ok=True)
