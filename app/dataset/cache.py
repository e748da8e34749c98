"""The on-disk cache of generated (and converted) datasets.

Layout: `<cfg.root>/<name>-<fingerprint>/data.pt` (`app.dataset.files.cache_path`), a
`torch.save`d dict of plain tensors, ints and nested dicts (safe for
`torch.load(weights_only=True)`; `Data` objects are rebuilt on load).

Concurrency: the first process to take `<dir>/.lock` (fcntl, with a timeout) generates and writes
`data.pt` through a unique temp file + `os.replace`; the others wait for the lock, then read the
finished file. Readers never see a half-written file because the rename is atomic. The file's
xxh3 is written beside it (`data.pt.xxh3`) and checked before each load: a cache that does not
match (bit rot, an edit, one written before checksums) is generated again, with a warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch

from app.fsutil import file_lock
from app.partition.reader import checksum_problem, save_checked

log = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 3600.0  # generating ogbn-products scale takes minutes; never wait forever


def load_plain(path: Path) -> dict:
    """Read a cached dict; memory-mapped, so a second load is fast and shares pages."""
    return torch.load(path, weights_only=True, mmap=True)


def cached(path: Path, build: Callable[[], dict]) -> dict:
    """The dict stored at `path`, building and writing it once (under a lock) if missing, or
    again, with a warning, if it does not match the checksum written with it."""
    if not checksum_problem(path):
        return load_plain(path)
    with file_lock(
        path.parent / ".lock", LOCK_TIMEOUT_S, "another process generating this dataset"
    ):
        if path.exists():  # another process may have written it while we waited
            problem = checksum_problem(path)
            if not problem:
                return load_plain(path)
            log.warning("dataset cache %s: %s; generating it again", path, problem)
        start = time.perf_counter()
        obj = build()
        save_checked(obj, path)
        log.info("generated %s in %.1fs", path, time.perf_counter() - start)
    return obj
