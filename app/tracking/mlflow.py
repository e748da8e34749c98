"""Experiment tracking: a `Tracker` interface, a no-op `NullTracker` and an MLflow client one.

Only trainer rank 0 logs; every other process gets a `NullTracker`, so call sites never ask
"am I rank 0?". `MlflowTracker` talks to the store through `MlflowClient` with explicit run
ids (no fluent global "active run"), because a multirun sweep runs several jobs in one process.

The default store is a SQLite file (`Config.tracking_uri`). Creating it runs MLflow's schema
migrations, which race when several jobs or processes open a fresh file at once, so the first
open (and get-or-create of the experiment) happens under an exclusive `fcntl` lock on
`<db>.lock`. Artifacts go next to the database (`<db dir>/artifacts/<experiment id>`), never
into the current directory. MLflow is imported lazily: it takes seconds to import.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any

from app.fsutil import file_lock

log = logging.getLogger("distgnn.tracking")

FINISHED, FAILED, KILLED = "FINISHED", "FAILED", "KILLED"
PARENT_TAG = "mlflow.parentRunId"
LOCK_TIMEOUT_S = 120.0


class Tracker:
    """The interface; every method is a no-op here (this is what non-rank-0 processes use)."""

    run_id: str | None = None

    def start(
        self,
        cfg: Any,
        run_name: str | None = None,
        parent_run_id: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> str | None:
        return None

    def log_params(self, params: dict[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        pass

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        pass

    def log_text(self, text: str, name: str) -> None:
        pass

    def set_tags(self, tags: dict[str, str]) -> None:
        pass

    def end(self, status: str = FINISHED, error: str | None = None) -> None:
        pass

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: Any) -> bool:
        """End the run: KILLED on Ctrl-C / SystemExit, FAILED (tag `error`) on any exception."""
        if exc is None:
            self.end(FINISHED)
        elif isinstance(exc, KeyboardInterrupt | SystemExit):
            self.end(KILLED, error=type(exc).__name__)
        else:
            self.end(FAILED, error=f"{type(exc).__name__}: {exc}")
        return False


class NullTracker(Tracker):
    """Logs nothing (trainers other than rank 0, samplers, `mlflow.enabled=false`)."""


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dataclasses / dicts as `{"dataset.num_nodes": 100000, ...}`."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if not isinstance(obj, dict):
        return {prefix: obj}
    flat: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if dataclasses.is_dataclass(value) or isinstance(value, dict):
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat


def quiet_mlflow() -> None:
    """Silence MLflow / alembic chatter (migrations, git probing, beta warnings)."""
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    import mlflow  # noqa: F401  (configures its loggers on import: override them afterwards)

    for name in ("mlflow", "alembic", "sqlalchemy", "urllib3", "git"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"mlflow(\.|$)")
    warnings.filterwarnings("ignore", module=r"alembic(\.|$)")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///...` URI, else None."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :])


class MlflowTracker(Tracker):
    """One MLflow run per job, addressed by id through an `MlflowClient`."""

    def __init__(self, tracking_uri: str, experiment_name: str = "distgnn") -> None:
        quiet_mlflow()
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.experiment_id = self._open_store()
        self.run_id = None

    def _open_store(self) -> str:
        """Open (creating, migrating) the store and the experiment under the DB's file lock."""
        from mlflow.tracking import MlflowClient

        db = sqlite_path(self.tracking_uri)
        if db is None:
            self.client = MlflowClient(self.tracking_uri)
            return self._experiment_id(None)
        with file_lock(db.with_name(db.name + ".lock"), LOCK_TIMEOUT_S, "a job creating the store"):
            self.client = MlflowClient(self.tracking_uri)
            return self._experiment_id(db.parent / "artifacts")

    def _experiment_id(self, artifact_root: Path | None) -> str:
        exp = self.client.get_experiment_by_name(self.experiment_name)
        if exp is not None:
            return exp.experiment_id
        location = None
        if artifact_root is not None:
            location = (artifact_root / self.experiment_name).resolve().as_uri()
        return self.client.create_experiment(self.experiment_name, artifact_location=location)

    def start(
        self,
        cfg: Any,
        run_name: str | None = None,
        parent_run_id: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> str:
        """Create the run (a child of `parent_run_id` if given) and log `cfg` as params."""
        if self.run_id is not None:
            raise RuntimeError(f"run {self.run_id} is still open: end() it before start()")
        all_tags = dict(tags or {})
        if run_name is None:
            run_name = getattr(getattr(cfg, "mlflow", None), "run_name", None)
        if parent_run_id:
            all_tags[PARENT_TAG] = parent_run_id
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=all_tags)
        self.run_id = run.info.run_id
        if cfg is not None:
            self.log_params(flatten(cfg))
        return self.run_id

    def start_parent(self, cfg_name: str, tags: dict[str, str] | None = None) -> str:
        """A parent run for a multirun sweep; children pass its id as `parent_run_id`."""
        run = self.client.create_run(self.experiment_id, run_name=cfg_name, tags=tags or {})
        return run.info.run_id

    def end_parent(self, run_id: str, status: str = FINISHED) -> None:
        self.client.set_terminated(run_id, status)

    def _run(self) -> str:
        if self.run_id is None:
            raise RuntimeError("no MLflow run is open: call start() first")
        return self.run_id

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

        items = [Param(k, str(v)[:MAX_PARAM_VAL_LENGTH]) for k, v in flatten(params).items()]
        for i in range(0, len(items), MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(self._run(), params=items[i : i + MAX_PARAMS_TAGS_PER_BATCH])

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric
        from mlflow.utils.validation import MAX_METRICS_PER_BATCH

        now = int(time.time() * 1000)
        items = [
            Metric(k, float(v), now, step or 0)
            for k, v in metrics.items()
            if isinstance(v, int | float) and not math.isnan(v)
        ]
        for i in range(0, len(items), MAX_METRICS_PER_BATCH):
            self.client.log_batch(self._run(), metrics=items[i : i + MAX_METRICS_PER_BATCH])

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"artifact {path} does not exist")
        if path.is_dir():
            self.client.log_artifacts(self._run(), str(path), artifact_path)
        else:
            self.client.log_artifact(self._run(), str(path), artifact_path)

    def log_text(self, text: str, name: str) -> None:
        self.client.log_text(self._run(), text, name)

    def set_tags(self, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag
        from mlflow.utils.validation import MAX_TAG_VAL_LENGTH

        items = [RunTag(k, str(v)[:MAX_TAG_VAL_LENGTH]) for k, v in tags.items()]
        self.client.log_batch(self._run(), tags=items)

    def end(self, status: str = FINISHED, error: str | None = None) -> None:
        """Close the run (idempotent); `error` is kept as the run's `error` tag."""
        if status not in (FINISHED, FAILED, KILLED):
            raise ValueError(f"run status {status!r}: expected FINISHED, FAILED or KILLED")
        if self.run_id is None:
            return
        run_id = self.run_id
        try:
            if error:
                self.set_tags({"error": error})
            self.client.set_terminated(run_id, status)
        finally:
            self.run_id = None


def make_tracker(cfg: Any, rank: int = 0) -> Tracker:
    """`MlflowTracker` for rank 0 when `cfg.mlflow.enabled`, else a `NullTracker`."""
    if rank != 0 or not cfg.mlflow.enabled:
        return NullTracker()
    return MlflowTracker(cfg.tracking_uri, cfg.mlflow.experiment_name)
