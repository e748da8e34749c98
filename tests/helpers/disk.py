"""Disks that misbehave: a small one that fills up, bit rot that keeps size and mtime."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's syntax: 200k, 2m) mounted at `path` for the block, unmounted
    after; the test is skipped where mounting is not permitted (not root)."""
    path.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]
    if subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("needs permission to mount a small tmpfs")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def rot(path: Path) -> None:
    """Bit rot as a disk does it: 400 KB overwritten mid-file, size and mtime unchanged."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(st.st_size // 3)
        f.write(b"\xa5" * min(400_000, st.st_size // 3))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
