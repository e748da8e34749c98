"""File-system helpers shared by every stage: an inter-process lock, atomic writes, and
`pid_alive`, which tells whether the process that left a file behind still runs.

Atomic: a reader sees the old file or the complete new one, never a half-written file, because
the data goes to a unique temp file in the same directory and is renamed over the target. A
write that fails for want of space (ENOSPC / EDQUOT, or torch.save's errno-less "[enforce fail
at inline_container.cc...]") becomes one line naming the file and the free space left
(`DiskFullError`), and its temp file is removed; `full_disk_named` does the same for any
other writer (numpy's chunks). `check_free_space` refuses, before a stage starts, what would
not fit.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
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


# torch.save reports a failed write (disk full) without an errno, e.g.
# "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598".
_WRITE_FAILED = ("inline_container.cc", "PytorchStreamWriter failed", "file write failed")


class DiskFullError(OSError):
    """A write failed for want of space: one line naming the file and the free space."""

    def __init__(self, path: Path, what: str = "writing") -> None:
        where = Path(path)
        super().__init__(
            errno.ENOSPC,
            f"no space left on device {what} {where} ({free_mib(where):.0f} MiB free): free "
            "some space, or set output_dir (or the path named) on a larger disk",
        )

    def __str__(self) -> str:
        return str(self.strerror)


class NotEnoughSpaceError(DiskFullError):
    """Refused before writing: the bytes a stage would write exceed the free space."""

    def __init__(self, where: str, need_mib: float, free: float, what: str) -> None:
        OSError.__init__(
            self,
            errno.ENOSPC,
            f"not enough disk for {what} under {where}: needs ~{need_mib:,.0f} MiB, "
            f"{free:,.0f} MiB free: free some space, or point it (the path's setting: "
            "dataset.root, partition.root, output_dir) at a larger disk",
        )


def is_write_failure(err: BaseException) -> bool:
    """ENOSPC / EDQUOT / EFBIG, torch.save's errno-less failure ("[enforce fail at ..."), or
    numpy's errno-less short write ("664383 requested and 145731 written")."""
    if isinstance(err, OSError):
        if err.errno is None and re.search(r"\d+ requested and \d+ written", str(err)):
            return True
        return err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    return isinstance(err, RuntimeError) and any(s in str(err) for s in _WRITE_FAILED)


@contextmanager
def full_disk_named(path: Path) -> Iterator[None]:
    """Writes of `path` inside the block that fail for want of space raise `DiskFullError`
    naming it and the free space (numpy's and the OS's errors name neither)."""
    try:
        yield
    except (OSError, RuntimeError) as err:
        if isinstance(err, DiskFullError) or not is_write_failure(err):
            raise
        raise DiskFullError(path) from None


def check_free_space(needs: Sequence[tuple[Path, float, str]]) -> None:
    """Refuse (`NotEnoughSpaceError`, one line) when what is to be written does not fit:
    `needs` = (folder, bytes, what) per stage; stages on one file system add up."""
    by_device: dict[int, list[tuple[Path, float, str]]] = {}
    for folder, size, what in needs:
        by_device.setdefault(_existing(folder).stat().st_dev, []).append((folder, size, what))
    for group in by_device.values():
        need = sum(size for _, size, _ in group) / 2**20
        free = free_mib(group[0][0])
        if need > free:
            folders = " and ".join(dict.fromkeys(str(f) for f, _, _ in group))
            what = " + ".join(w for _, _, w in group)
            raise NotEnoughSpaceError(folders, need, free, what)


def free_mib(where: Path) -> float:
    """Free space (MiB) of the file system holding `where` (or its nearest existing parent)."""
    return shutil.disk_usage(_existing(where)).free / 2**20


def _existing(where: Path) -> Path:
    """`where`, or its nearest existing parent (a folder not made yet)."""
    path = Path(where).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


_HOST = socket.gethostname()


def _temp_beside(path: Path) -> Path:
    """A unique temp file next to `path`, named after this host and pid: a writer killed
    mid-write leaves it, and `remove_orphaned_temps` knows whether its writer is gone."""
    prefix = f".{path.name}.{_HOST}-{os.getpid()}."
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o644)  # mkstemp makes it private; outputs are shared data
    return Path(tmp)


def remove_orphaned_temps(folder: Path) -> list[Path]:
    """Remove the atomic writers' temp files under `folder` whose writer, a process of this
    host, is gone (a trainer SIGKILLed while writing a checkpoint); the paths removed. Temp
    files of live processes, and of other hosts sharing the folder, are left alone."""
    own = re.compile(rf"\.{re.escape(_HOST)}-(\d+)\.\w+\.tmp$")
    removed = []
    for tmp in Path(folder).rglob(".*.tmp"):
        match = own.search(tmp.name)
        if match and not pid_alive(int(match[1])):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_beside(path)
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as err:
        if not is_write_failure(err):
            raise
        tmp.unlink(missing_ok=True)
        raise DiskFullError(path) from None
    finally:
        tmp.unlink(missing_ok=True)


def torch_save_atomic(
    obj: Any, path: Path, before_replace: Callable[[Path], None] | None = None
) -> None:
    """`torch.save(obj)` to `path` atomically; `before_replace(temp file)` runs once the bytes
    are written, before the rename (`app.partition.reader.save_checked` records their sum)."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_beside(path)
    try:
        torch.save(obj, tmp)
        if before_replace is not None:
            before_replace(tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:
        if not is_write_failure(err):
            raise
        tmp.unlink(missing_ok=True)  # first: the free space shown is after this cleanup
        raise DiskFullError(path) from None
    finally:
        tmp.unlink(missing_ok=True)


def die_with_parent() -> None:
    """Get SIGTERM when the parent process (the thread that started this one) dies (Linux
    prctl; a launcher's children call it before exec, a fork server's samplers after fork)."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


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
