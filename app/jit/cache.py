"""`SharedCacheLocator`: numba's cache for this package's kernels, outside the work tree.

numba picks, per kernel, the first locator whose `from_function` accepts its source file
(`app.jit.install` puts this one first). It accepts only files of the `app` package and keys
the cache directory by the module's dotted name and a hash of its source, not by its path: two
checkouts of the same source share compiled kernels, and checkouts of different sources keep
theirs side by side instead of overwriting each other's.
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from pathlib import Path

from numba.core.caching import _CacheLocator, _SourceFileBackedLocatorMixin

from app.jit import cache_root

PACKAGE = Path(__file__).resolve().parents[1]  # .../app


@cache
def _key(py_file: str, mtime: float, size: int) -> str:
    """`app.sampler.kernel-<16 hex of the source's sha256>` (memoised per file version)."""
    path = Path(py_file).resolve()
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return f"{module}-{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"


class SharedCacheLocator(_SourceFileBackedLocatorMixin, _CacheLocator):
    def __init__(self, py_func, py_file: str) -> None:
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        st = os.stat(py_file)
        self._cache_path = str(cache_root() / _key(py_file, st.st_mtime, st.st_size))

    def get_cache_path(self) -> str:
        return self._cache_path

    @classmethod
    def from_function(cls, py_func, py_file: str):
        """This package's files only; None (numba's next locator) for any other, or when the
        cache directory cannot be written."""
        try:
            Path(py_file).resolve().relative_to(PACKAGE)
        except ValueError:
            return None
        return super().from_function(py_func, py_file)
