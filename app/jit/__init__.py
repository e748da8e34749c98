"""Numba compilation: one kernel cache per machine, warmed once, announced when it compiles.

numba keeps compiled kernels next to their source by default (`__pycache__`), keyed by the
file's path, so every checkout, CI run and container compiled every kernel again, and each
process of a cold job compiled the same kernels at the same time. `install()` (run when `app`
is imported, before any kernel module) points numba at `app.jit.cache.SharedCacheLocator`: the
project's kernels live in one directory outside the work tree, keyed by module name and source
hash, shared by every checkout and every process. `python -m app.jit` (run by `make install`)
and a launcher that finds the cache cold compile them once (`app.jit.warm`); any compilation
that still happens in a process is announced in one line (`watch_compiles`).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

CACHE_ENV = "DISTGNN_CACHE_DIR"  # the cache's root (default: $XDG_CACHE_HOME/distgnn)
LOCATORS_ENV = "NUMBA_CACHE_LOCATOR_CLASSES"
# ours first; numba 0.68's own locators after it, in numba's order, for every other file
LOCATORS = (
    "app.jit.cache.SharedCacheLocator,UserProvidedCacheLocator,InTreeCacheLocator,"
    "UserWideCacheLocator,IPythonCacheLocator,ZipCacheLocator"
)


def cache_root() -> Path:
    """Where the project's compiled kernels live, per numba and Python version."""
    base = os.environ.get(CACHE_ENV)
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "distgnn")
    from importlib.metadata import version

    tag = f"numba-{version('numba')}-py{sys.version_info[0]}{sys.version_info[1]}"
    return Path(base) / tag


def install() -> None:
    """Make numba cache this package's kernels in `cache_root()` (a user's own
    `NUMBA_CACHE_LOCATOR_CLASSES` wins). Cheap: numba is not imported here."""
    os.environ.setdefault(LOCATORS_ENV, LOCATORS)
    config = sys.modules.get("numba.core.config")
    if config is not None and not getattr(config, "CACHE_LOCATOR_CLASSES", None):
        config.CACHE_LOCATOR_CLASSES = os.environ[LOCATORS_ENV]  # numba imported before us


def watch_compiles(level: int = logging.INFO) -> None:
    """Announce this process's numba compilations in its log at `level` (registered once)."""
    from app.jit.watch import register

    register(level)
