"""New SQLite stores start as a copy of an empty, already migrated one.

Creating an MLflow SQLite store runs every schema migration (alembic), which takes seconds (14 s
on a loaded 2-core machine, against 0.1 s to open an existing store) and is paid again by every
fresh `output_dir`, test and bench. The first store this machine creates with a given MLflow
version is copied to `<cache>/mlflow-<version>-empty.db` right after its migrations; later fresh
stores are copies of it. The cache is `$DISTGNN_CACHE_DIR`, else `~/.cache/distgnn`; a cache
that cannot be written only means migrations run as before.
"""

from __future__ import annotations

import logging
import os
import shutil
from importlib.metadata import version
from pathlib import Path

log = logging.getLogger("distgnn.tracking")


def template_path() -> Path:
    cache = os.environ.get("DISTGNN_CACHE_DIR") or Path.home() / ".cache" / "distgnn"
    return Path(cache) / f"mlflow-{version('mlflow')}-empty.db"


def _copy_atomic(src: Path, dst: Path) -> None:
    tmp = dst.with_name(f"{dst.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)


def restore(db: Path) -> bool:
    """Create `db` (which must not exist) from the template; False when there is none."""
    template = template_path()
    if not template.is_file():
        return False
    db.parent.mkdir(parents=True, exist_ok=True)
    _copy_atomic(template, db)
    return True


def save(db: Path) -> None:
    """Keep the freshly migrated, still empty `db` as the template (if there is none yet)."""
    template = template_path()
    if template.is_file():
        return
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        _copy_atomic(db, template)
    except OSError as err:
        log.debug("no MLflow store template at %s: %s", template, err)
