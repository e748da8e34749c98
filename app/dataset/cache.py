"""The on-disk cache of generated (and converted) datasets.

Layout: `<cfg.root>/<name>-<fingerprint>/data.pt` (`app.dataset.files.cache_path`), a
`torch.save`d dict of plain tensors, ints and nested dicts (safe for
`torch.load(weights_only=True)`; `Data` objects are rebuilt on load).

Concurrency: the first process to take `<dir>/.lock` (fcntl, with a timeout) generates and writes
`data.pt` through a unique temp file + `os.replace`; the others wait for the lock, then read the
finished file. Readers never see a half-written file because the rename is atomic.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch

from app.fsutil import file_lock, torch_save_atomic

log = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 3600.0  # generating ogbn-products scale takes minutes; never wait forever


def load_plain(path: Path) -> dict:
    """Read a cached dict; memory-mapped, so a second load is fast and shares pages."""
    return torch.load(path, weights_only=True, mmap=True)


def cached(path: Path, build: Callable[[], dict]) -> dict:
    """The dict stored at `path`, building and writing it once (under a lock) if missing."""
    if path.exists():
        return load_plain(path)
    with file_lock(
        path.parent / ".lock", LOCK_TIMEOUT_S, "another process generating this dataset"
    ):
        if path.exists():  # another process wrote it while we waited
            return load_plain(path)
        start = time.perf_counter()
        obj = build()
        torch_save_atomic(obj, path)
        log.info("generated %s in %.1fs", path, time.perf_counter() - start)
    return obj
