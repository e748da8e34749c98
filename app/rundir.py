"""What a job that ends early leaves in its Hydra run dir: nothing when it was refused before it
started, its traceback when it failed unexpectedly (the console gets one line)."""

from __future__ import annotations

import shutil
import traceback
from pathlib import Path

HYDRA_FILES = ".hydra"  # config.yaml, hydra.yaml, overrides.yaml: written before the job starts
TRACEBACK_FILE = "traceback.log"


def remove_unused_run_dir(run_dir: Path) -> bool:
    """Remove `run_dir` if it holds only Hydra's files and empty logs; return whether it did.

    A dir with anything the job wrote (a log line, a partition, a result) is kept.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return False
    for path in run_dir.rglob("*"):
        inside_hydra = path.relative_to(run_dir).parts[0] == HYDRA_FILES
        if path.is_file() and not inside_hydra and path.stat().st_size > 0:
            return False
    shutil.rmtree(run_dir, ignore_errors=True)
    try:
        run_dir.parent.rmdir()  # `outputs/runs/` made for this run alone goes too
    except OSError:
        pass  # not empty: other runs live there
    return True


def write_traceback(run_dir: Path, err: BaseException) -> Path:
    """Write `err`'s traceback to `<run_dir>/traceback.log`; return the path."""
    path = Path(run_dir) / TRACEBACK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(traceback.format_exception(err)), encoding="utf-8")
    return path
