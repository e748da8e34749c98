"""Experiment tracking: a `Tracker` interface, a no-op `NullTracker` and an MLflow client one.

Only trainer rank 0 logs; every other process gets a `NullTracker`, so call sites never ask
"am I rank 0?". `MlflowTracker` talks to the store through `MlflowClient` with explicit run
ids (no fluent global "active run"), because a multirun sweep runs several jobs in one process.

The default store is a SQLite file (`Config.tracking_uri`). Creating it runs MLflow's schema
migrations, which race when several jobs or processes open a fresh file at once, so the first
open (and get-or-create of the experiment) happens under an exclusive `fcntl` lock on
`<db>.lock`; a fresh file is a copy of an already migrated empty store (`store_template`).
Artifacts go next to the database (`<db dir>/artifacts/<experiment id>`), never into the
current directory. MLflow is imported lazily: it takes seconds to import.

What a person sees in the UI is shaped here, so every call site gets it:
- experiments are tagged as model-training ones (`mlflow.experimentKind`), so MLflow 3 opens
  them on the runs and their charts, not on its GenAI "Evaluations" view;
- runs without an explicit name get a readable unique one (`naming.run_name`);
- the training metrics keep their names and open the chart view; the others are stored as
  `system/<name>`, MLflow's "System metrics" section (`metric_keys`);
- credentials never reach the store: params, tags, text artifacts and logged text go through
  `app.tracking.redact` (the one place that knows their forms);
- partition stats logged as metrics (`partition.*` / `partition/*`) become `partition_stats.*`
  params, `partition_stats.json` and one PNG (`partition_stats`), not a chart per number;
- `end()` of a FINISHED run logs `startup_s` (the start-up phases timed in this process,
  `progress.phase`) and attaches a PNG of the learning curves; a FAILED run's `error` tag is
  the first line of the exception (the one being handled when no error is passed).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from app.config import ConfigError
from app.contract import RUN_ID_FILE, RUN_INFO_FILE
from app.fsutil import DiskFullError, file_lock, is_write_failure, write_text_atomic
from app.tracking import metric_keys, partition_stats, plots, store_template
from app.tracking.http_store import check_server
from app.tracking.naming import job_overrides
from app.tracking.naming import run_name as default_run_name
from app.tracking.progress import log_startup, phase, ticking
from app.tracking.redact import (
    redact,
    redact_override,
    redact_tags,
    redact_text,
    redacted_copy,
)

log = logging.getLogger("distgnn.tracking")

FINISHED, FAILED, KILLED = "FINISHED", "FAILED", "KILLED"
PARENT_TAG = "mlflow.parentRunId"
LOCK_TIMEOUT_S = 120.0
# MLflow 3's UI opens experiments by kind; without this tag it infers one and may pick GenAI.
KIND_TAG, KIND_TRAINING = "mlflow.experimentKind", "custom_model_development"
CURVES_PNG = "learning_curves.png"


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

    def log_partition_stats(self, stats: dict[str, Any]) -> None:
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
            self.end(KILLED, error=stop_line(exc))
        else:
            self.end(FAILED, error=error_line(exc))
        return False


class NullTracker(Tracker):
    """Logs nothing (trainers other than rank 0, samplers, `mlflow.enabled=false`)."""


def error_line(exc: BaseException) -> str:
    """`Type: first line of the message`: the `error` tag of a FAILED run."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def stop_line(exc: BaseException) -> str:
    """The `error` tag of a KILLED run: which signal (or exit) stopped it."""
    if isinstance(exc, KeyboardInterrupt):
        sigterm = bool(exc.args) and exc.args[0] == "signal 15"
        return "terminated (SIGTERM)" if sigterm else "interrupted (Ctrl-C / SIGINT)"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


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
    # MLflow prints "View run ... at: <tracking URI>" for http stores: a URI with userinfo
    # would reach the console and the uploaded logs (the summary prints a redacted link).
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    import mlflow  # noqa: F401  (configures its loggers on import: override them afterwards)

    for name in ("mlflow", "alembic", "sqlalchemy", "urllib3", "git"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # logs every SQLAlchemy OperationalError with its full traceback (~150 lines for a full
    # disk) before raising it again as an MlflowException: the raise is enough
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", module=r"mlflow(\.|$)")
    warnings.filterwarnings("ignore", module=r"alembic(\.|$)")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///...` URI, else None."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :])


def check_store(uri: str) -> None:
    """Refuse, in one line, a SQLite store that cannot be opened for writing (a folder in the
    file's place, a read-only location): MLflow would retry opening it for about 100 s first;
    and a tracking server nothing answers on (`http_store.check_server`), within seconds."""
    check_server(uri)
    db = sqlite_path(uri)
    if db is None:
        return
    if db.exists() and not db.is_file():
        raise ConfigError(f"mlflow.tracking_uri={uri!r}: {db} is not a file; name a .db file")
    where = db if db.exists() else next(p for p in db.parents if p.exists())
    if not os.access(where, os.W_OK):
        raise ConfigError(f"mlflow.tracking_uri={uri!r}: {where} is not writable")


STORE_FULL = ("database or disk is full", "No space left on device")


def store_full(err: BaseException, uri: str) -> DiskFullError | None:
    """A full disk under the SQLite store `uri` as one `DiskFullError` line (None: `err` is
    something else): SQLite says "database or disk is full" inside a multi-line MlflowException."""
    db = sqlite_path(uri)
    if db is None or not (is_write_failure(err) or any(s in str(err) for s in STORE_FULL)):
        return None
    return DiskFullError(db, "writing the MLflow store")


class _StoreClient:
    """An `MlflowClient` whose calls raise a full disk under the store as `DiskFullError`."""

    def __init__(self, client: Any, uri: str) -> None:
        self._client, self._uri = client, uri

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if not callable(method):
            return method

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except Exception as err:
                full = store_full(err, self._uri)
                if full is None:
                    raise
                raise full from None

        return call


class MlflowTracker(Tracker):
    """One MLflow run per job, addressed by id through an `MlflowClient`."""

    def __init__(self, tracking_uri: str, experiment_name: str = "distgnn") -> None:
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        with phase("mlflow store"):  # importing mlflow, then the store: seconds under load
            quiet_mlflow()
            self.experiment_id = self._open_store()
        self.run_id = None
        self.history: dict[str, list[tuple[int, float]]] = {}
        self.partition_logged = False
        self.partition_parts: list[dict[str, Any]] = []  # rows for the PNG drawn at the end

    def _open_store(self) -> str:
        """Open (creating, migrating) the store and the experiment under the DB's file lock."""
        from mlflow.tracking import MlflowClient

        check_store(self.tracking_uri)
        db = sqlite_path(self.tracking_uri)
        if db is None:
            self.client = MlflowClient(self.tracking_uri)
            return self._experiment_id(None)
        with file_lock(db.with_name(db.name + ".lock"), LOCK_TIMEOUT_S, "a job creating the store"):
            migrate = not db.exists() and not store_template.restore(db)
            self.client = _StoreClient(MlflowClient(self.tracking_uri), self.tracking_uri)
            if migrate:
                store_template.save(db)
            return self._experiment_id(db.parent / "artifacts")

    def _experiment_id(self, artifact_root: Path | None) -> str:
        """Get or create the experiment, tagged as a model-training one (older ones too)."""
        exp = self.client.get_experiment_by_name(self.experiment_name)
        if exp is not None:
            if exp.tags.get(KIND_TAG) is None:
                self.client.set_experiment_tag(exp.experiment_id, KIND_TAG, KIND_TRAINING)
            return exp.experiment_id
        location = None
        if artifact_root is not None:
            location = (artifact_root / self.experiment_name).resolve().as_uri()
        return self.client.create_experiment(
            self.experiment_name, artifact_location=location, tags={KIND_TAG: KIND_TRAINING}
        )

    def start(
        self,
        cfg: Any,
        run_name: str | None = None,
        parent_run_id: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> str:
        """Create the run (a child of `parent_run_id` if given) and log `cfg` as params.

        Without `run_name` (nor `mlflow.run_name`) the run is named `naming.run_name`. A
        `job_dir` tag makes the run findable from the job dir: its id is written to
        `<job_dir>/mlflow_run_id` (and with its name, experiment and store to
        `mlflow_run.json`), and the job's overrides become the `overrides` tag.
        """
        if self.run_id is not None:
            raise RuntimeError(f"run {self.run_id} is still open: end() it before start()")
        all_tags = dict(tags or {})
        job_dir = all_tags.get("job_dir") or None
        if run_name is None:
            run_name = getattr(getattr(cfg, "mlflow", None), "run_name", None)
        if run_name is None and cfg is not None:
            run_name = default_run_name(cfg, job_dir)
        run_name = redact_text(run_name) if run_name else run_name
        if parent_run_id:
            all_tags[PARENT_TAG] = parent_run_id
        if job_dir:
            overrides = [redact_override(o) for o in job_overrides(job_dir)]
            all_tags.setdefault("overrides", " ".join(overrides))
        run = self.client.create_run(
            self.experiment_id, run_name=run_name, tags=redact_tags(all_tags)
        )
        self.run_id = run.info.run_id
        self.history, self.partition_logged, self.partition_parts = {}, False, []
        if job_dir and Path(job_dir).is_dir():
            write_text_atomic(Path(job_dir) / RUN_ID_FILE, self.run_id)
            info = {"run_id": self.run_id, "run_name": run.info.run_name}
            uri = redact_text(self.tracking_uri)  # the summary's UI command: never the password
            info |= {"experiment_id": self.experiment_id, "tracking_uri": uri}
            write_text_atomic(Path(job_dir) / RUN_INFO_FILE, json.dumps(info, indent=1))
        if cfg is not None:
            self.log_params(flatten(cfg))
        return self.run_id

    def start_parent(self, cfg_name: str, tags: dict[str, str] | None = None) -> str:
        """A parent run for a multirun sweep; children pass its id as `parent_run_id`."""
        run = self.client.create_run(
            self.experiment_id, run_name=redact_text(cfg_name), tags=redact_tags(tags or {})
        )
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

        items = [
            Param(k, redact(k, str(v))[:MAX_PARAM_VAL_LENGTH]) for k, v in flatten(params).items()
        ]
        for i in range(0, len(items), MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(self._run(), params=items[i : i + MAX_PARAMS_TAGS_PER_BATCH])

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Log numbers at `step` under their stored keys (`metric_keys`: system metrics as
        `system/<name>`, no `epoch`); partition stats among them go to `log_partition_stats`."""
        from mlflow.entities import Metric
        from mlflow.utils.validation import MAX_METRICS_PER_BATCH

        part = {k: v for k, v in metrics.items() if partition_stats.is_partition_key(k)}
        if part:
            self.log_partition_stats(partition_stats.normalise(part))
        now = int(time.time() * 1000)
        kept = {
            k: float(v)
            for k, v in metrics.items()
            if isinstance(v, int | float) and not math.isnan(v) and k not in part
        }
        for k, v in kept.items():
            self.history.setdefault(k, []).append((step or 0, v))
        items = [Metric(k, v, now, step or 0) for k, v in metric_keys.stored_metrics(kept).items()]
        for i in range(0, len(items), MAX_METRICS_PER_BATCH):
            self.client.log_batch(self._run(), metrics=items[i : i + MAX_METRICS_PER_BATCH])

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        """Upload a file or folder, its text files redacted (`redact.redacted_copy`)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"artifact {path} does not exist")
        with redacted_copy(path) as copy:
            if copy.is_dir():
                self.client.log_artifacts(self._run(), str(copy), artifact_path)
            else:
                self.client.log_artifact(self._run(), str(copy), artifact_path)

    def log_text(self, text: str, name: str) -> None:
        self.client.log_text(self._run(), redact_text(text), name)

    def set_tags(self, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag
        from mlflow.utils.validation import MAX_TAG_VAL_LENGTH

        items = [RunTag(k, v[:MAX_TAG_VAL_LENGTH]) for k, v in redact_tags(tags).items()]
        self.client.log_batch(self._run(), tags=items)

    def log_partition_stats(self, stats: dict[str, Any]) -> None:
        """Partition stats, once per run: `partition_stats.*` params, JSON, a bar PNG at `end()`.

        `stats` is META.json's `stats` dict or `partition_stats.normalise`'s result.
        """
        if self.partition_logged:
            return
        self.partition_logged = True
        if "scalars" not in stats:
            stats = partition_stats.from_meta_stats(stats)
        self.log_params(partition_stats.as_params(stats))
        self.log_text(json.dumps(stats, indent=1), "partition_stats.json")
        self.partition_parts = stats["parts"]  # drawn by end(): plotting costs seconds

    def _log_png(self, draw: Any, name: str) -> None:
        """Draw a PNG with `draw(path) -> bool` and log it; a plotting error is only logged."""
        try:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / name
                if draw(path):
                    self.client.log_artifact(self._run(), str(path))
        except Exception as err:  # a missing plot must never fail the training run
            log.warning("could not attach %s to run %s: %s", name, self.run_id, err)

    def _before_end(self, run_id: str) -> None:
        """`startup_s` and the PNGs; a problem here is logged, the run still ends."""
        try:
            log_startup(self)
            if self.partition_parts:
                parts = self.partition_parts
                self._log_png(
                    lambda path: plots.partition_bars(parts, path, "partition: parts"),
                    "partition_stats.png",
                )
            if self.history:
                name = self.client.get_run(run_id).info.run_name
                self._log_png(
                    lambda path: plots.learning_curves(self.history, path, name), CURVES_PNG
                )
        except Exception as err:
            log.warning("run %s: could not log start-up times or curves: %s", run_id, err)

    def end(self, status: str = FINISHED, error: str | None = None) -> None:
        """Close the run (idempotent); a FINISHED one after `startup_s` and the curves' PNG.

        `error` (its first line) is kept as the run's `error` tag; a FAILED run ended without
        one while an exception is being handled (a `finally:`) gets that exception's.
        """
        if status not in (FINISHED, FAILED, KILLED):
            raise ValueError(f"run status {status!r}: expected FINISHED, FAILED or KILLED")
        if self.run_id is None:
            return
        run_id = self.run_id
        handled = sys.exc_info()[1]
        if not error and status == FAILED and handled is not None:
            error = error_line(handled)
        try:
            if status == FINISHED:  # a failing or interrupted job has seconds left: no plots
                with ticking(f"closing MLflow run {run_id} (plots, startup times)"):
                    self._before_end(run_id)
            if error:
                self.set_tags({"error": (error.strip().splitlines() or [error])[0]})
            self.client.set_terminated(run_id, status)
        finally:
            self.run_id = None


def make_tracker(cfg: Any, rank: int = 0) -> Tracker:
    """`MlflowTracker` for rank 0 when `cfg.mlflow.enabled`, else a `NullTracker`."""
    if rank != 0 or not cfg.mlflow.enabled:
        return NullTracker()
    return MlflowTracker(cfg.tracking_uri, cfg.mlflow.experiment_name)
