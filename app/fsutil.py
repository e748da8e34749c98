"""File-system helpers shared by every stage: an inter-process lock, atomic writes, and
`pid_alive`, which tells whether the process that left a file behind still runs.

Atomic: a reader sees the old file or the complete new one, never a half-written file, because
the data goes to a unique temp file in the same directory and is renamed over the target.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def file_lock(
    path: Path, timeout_s: float, holder: str = "another distgnn process"
) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` (created if missing); TimeoutError after `timeout_s`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{path}: still locked after {timeout_s:.0f} s by {holder}; wait for it, "
                        "or delete the lock file if no distgnn job is running"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _temp_beside(path: Path) -> Path:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o644)  # mkstemp makes it private; outputs are shared data
    return Path(tmp)


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_beside(path)
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def torch_save_atomic(obj: Any, path: Path) -> None:
    """`torch.save(obj)` to `path` atomically."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_beside(path)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, killed but not yet reaped, counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust the signal probe
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
