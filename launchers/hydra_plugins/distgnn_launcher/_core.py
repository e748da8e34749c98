"""The launcher's work: run a sweep's jobs one after another under one MLflow parent run.

Like Hydra's BasicLauncher, each job's config is composed from the sweep config plus its
overrides, gets its job number and output dir (`hydra.sweep.dir/hydra.sweep.subdir`), and runs
through Hydra's `run_job` with the app's task function. The task function is the same one a
single run calls, so a job of a sweep and a plain `python -m app ...` run share every step
(`app.run.run_task` → `app.launch.run_job`: plan, partition, spawn, watch).

MLflow nesting: before the first job, one parent run is created in the app's tracking store and
its id exported as `DISTGNN_MLFLOW_PARENT_RUN_ID`; `app.run` passes it on, and each job's run
(started by its rank-0 trainer) is tagged as its child. The parent ends FINISHED, FAILED (a job
failed) or KILLED (Ctrl-C).

Summary: after the last job the launcher prints one table row per job (the overrides that differ,
final metrics, wall time; the best job by `train.monitor` marked `*`), writes it to
`<sweep dir>/summary.md`, and logs it on the parent run (`sweep_summary.md`, `best_*` params),
so the sweep's result is on the console, on disk and in the UI.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.core.utils import (
    JobReturn,
    JobStatus,
    configure_log,
    filter_overrides,
    run_job,
    setup_globals,
)
from omegaconf import DictConfig, open_dict

if TYPE_CHECKING:
    from .launcher import DistgnnLauncher

log = logging.getLogger(__name__)


def launch(
    launcher: DistgnnLauncher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
) -> list[JobReturn]:
    """Run every job of this batch sequentially; return their `JobReturn`s in order."""
    from app.contract import PARENT_RUN_ENV

    setup_globals()
    assert launcher.config is not None, "setup() must run before launch()"
    config = launcher.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    log.info("distgnn launcher: %d jobs, one after another, in %s", len(job_overrides), sweep_dir)
    if launcher.mlflow_parent:
        launcher.parent_run_id = open_parent_run(config, sweep_dir, launcher.parent_run_id)
    runs: list[JobReturn] = []
    rows = launcher.rows  # this batch's jobs join the earlier batches' (an Optuna study's)
    status = "FINISHED"
    owns_failures = sweeper_owns_failures(config)
    if owns_failures and launcher.job_offset is None:  # a resumed study: after its jobs' dirs
        launcher.job_offset = next_job_num(sweep_dir)
    first = initial_job_idx + (launcher.job_offset or 0)
    try:
        with _exported(PARENT_RUN_ENV, launcher.parent_run_id):
            for idx, overrides in enumerate(job_overrides, start=first):
                start = time.perf_counter()
                runs.append(_run_one(launcher, idx, overrides, owns_failures))
                rows.append(job_row(idx, runs[-1], time.perf_counter() - start))
                if runs[-1].status == JobStatus.FAILED:
                    status = "FAILED"
                    log.error("job #%d failed: %s", idx, rows[-1].error)
                    if launcher.stop_on_failure:
                        break
        report_sweep(config, sweep_dir, runs, rows, launcher.parent_run_id)
        if status == "FAILED" and not owns_failures:  # Hydra's basic sweeper would re-raise
            failed = sum(r.status == "FAILED" for r in rows)  # the job's error, traceback and all
            print(f"sweep failed: {failed} of {len(rows)} jobs failed (see the table)", flush=True)
            raise SystemExit(1)
        status = "FINISHED"  # a study's failed trial is told to Optuna; the study goes on
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    except BaseException:  # e.g. SystemExit from a job whose config is invalid
        status = "FAILED"
        raise
    finally:
        if launcher.parent_run_id:
            close_parent_run(config, launcher.parent_run_id, status)
    return runs


PLOT_FILE = "sweep_plot.png"  # the monitor against each swept value, beside summary.md
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def sweeper_owns_failures(config: DictConfig) -> bool:
    """Whether the sweeper decides what a failed job means (Optuna tells it FAIL and goes on);
    Hydra's basic sweeper (grids) leaves it to this launcher, which ends the sweep with exit 1."""
    return str(config.hydra.sweeper.get("_target_", BASIC_SWEEPER)) != BASIC_SWEEPER


def next_job_num(sweep_dir: Path) -> int:
    """The first job number whose dir is not in `sweep_dir` yet (0 for a new sweep): a resumed
    Optuna study's trials get dirs of their own instead of the earlier trials'."""
    nums = [int(p.name) for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    return max(nums, default=-1) + 1


def prepare_sweep_dir(config: DictConfig) -> None:
    """Create `hydra.sweep.dir` in a multirun (Optuna opens its sqlite storage there before the
    first job runs)."""
    from hydra.types import RunMode

    if config.hydra.get("mode") == RunMode.MULTIRUN:
        Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)


def failed_return(err: SystemExit, overrides: Sequence[str]) -> JobReturn:
    """A job that exited (a config error: its line is out already) as a FAILED `JobReturn`, so
    a sweeper that owns failures records it instead of the whole study ending."""
    ret = JobReturn(overrides=list(overrides), status=JobStatus.FAILED)
    ret._return_value = RuntimeError(
        f"the job exited with code {err.code} (a config error: its line is on the console)"
    )
    return ret


def _run_one(
    launcher: DistgnnLauncher, idx: int, overrides: Sequence[str], owns_failures: bool = False
) -> JobReturn:
    """Compose job `idx`'s config and run it in its sweep subdir with the app's task function.

    `owns_failures`: a job's SystemExit (a config error) becomes a FAILED return."""
    assert launcher.hydra_context is not None and launcher.task_function is not None
    assert launcher.config is not None
    log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
    sweep_config = launcher.hydra_context.config_loader.load_sweep_config(
        launcher.config, list(overrides)
    )
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = idx
        sweep_config.hydra.job.num = idx
    try:
        ret = run_job(
            hydra_context=launcher.hydra_context,
            task_function=launcher.task_function,
            config=sweep_config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
    except SystemExit as err:
        if not owns_failures:
            raise
        ret = failed_return(err, overrides)
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    return ret


@contextmanager
def _exported(key: str, value: str | None) -> Iterator[None]:
    """Set env `key` to `value` (if any) while inside; restore the previous value after."""
    previous = os.environ.get(key)
    if value:
        os.environ[key] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = previous


def _app_config(config: DictConfig):  # -> app.config.Config
    from app.config import to_config

    node = copy.deepcopy(config)
    with open_dict(node):
        del node["hydra"]
    return to_config(node)


def open_parent_run(config: DictConfig, sweep_dir: Path, run_id: str | None) -> str | None:
    """Create the sweep's MLflow parent run (or mark an earlier batch's one RUNNING again)."""
    cfg = _app_config(config)
    if not cfg.mlflow.enabled:
        return None
    from app.tracking.mlflow import MlflowTracker

    tracker = MlflowTracker(cfg.tracking_uri, cfg.mlflow.experiment_name)
    if run_id:
        tracker.client.update_run(run_id, status="RUNNING")
        return run_id
    run_id = tracker.start_parent(
        cfg.mlflow.run_name or f"sweep-{cfg.experiment or cfg.dataset.name}-{sweep_dir.name}",
        tags={"sweep_dir": str(sweep_dir.resolve()), "launcher": "distgnn"},
    )
    from app.tracking.redact import redact_text

    log.info("MLflow parent run %s in %s", run_id, redact_text(cfg.tracking_uri))
    return run_id


def close_parent_run(config: DictConfig, run_id: str, status: str) -> None:
    """End the parent run with `status`; tracking problems are logged, never raised."""
    try:
        from app.tracking.mlflow import MlflowTracker

        cfg = _app_config(config)
        MlflowTracker(cfg.tracking_uri, cfg.mlflow.experiment_name).end_parent(run_id, status)
    except Exception as err:
        log.warning("could not end MLflow parent run %s: %s", run_id, err)


def job_row(idx: int, ret: JobReturn, seconds: float):  # -> app.tracking.summary.JobRow
    """The summary row of job `idx`: final metrics from its job dir, its MLflow run id."""
    from app.tracking.redact import redact_override
    from app.tracking.summary import JobRow, read_result, read_run_id

    job_dir = str(ret.hydra_cfg.hydra.runtime.output_dir) if ret.hydra_cfg else ""
    ok = ret.status == JobStatus.COMPLETED
    metrics = read_result(job_dir) if job_dir else {}
    return JobRow(
        label=str(idx),
        overrides=[redact_override(str(o)) for o in ret.overrides or []],  # printed, summary.md
        status="FINISHED" if ok else "FAILED",
        metrics=metrics,
        time_s=seconds,
        job_dir=job_dir,
        run_id=read_run_id(job_dir) if job_dir else None,
        error="" if ok else error_line(ret._return_value),
    )


def error_line(err: object) -> str:
    """A failed job's reason in one line: the culprit of a `JobFailed`, else type: message."""
    from app.launch.spawn import JobFailed

    if isinstance(err, JobFailed):
        return err.culprit
    first = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {first}" if isinstance(err, BaseException) else first


def report_sweep(
    config: DictConfig,
    sweep_dir: Path,
    runs: list[JobReturn],
    rows: list,
    parent_run_id: str | None,
) -> None:
    """Print the sweep's table, write `<sweep_dir>/summary.md`, log it on the parent run.

    Jobs without `result.json` (single-process ones) take their final metrics from their MLflow
    run. A reporting problem is logged, never raised: the jobs themselves are done.
    """
    from app.fsutil import write_text_atomic
    from app.tracking import plots, summary
    from app.tracking.metric_keys import plain_metrics
    from app.tracking.redact import redact_text

    try:
        cfg = _app_config(config)
        client = _client(cfg) if cfg.mlflow.enabled else None
        if client is not None:
            for row in rows:
                if row.run_id and not row.metrics:
                    row.metrics = plain_metrics(client.get_run(row.run_id).data.metrics)
                if row.run_id and row.time_s is not None:  # `report` shows the same time
                    client.set_tag(row.run_id, summary.JOB_TIME_TAG, str(row.time_s))
        first = next((r.cfg for r in runs if r.cfg is not None), None)
        monitor = summary.monitor_key(first if first is not None else cfg)
        table = summary.format_table(rows, monitor)
        best = summary.best_line(rows, monitor)
        text = f"# sweep {sweep_dir}\n\nmonitor: {monitor} ({best})\n\n{table}"
        write_text_atomic(sweep_dir / "summary.md", text)
        lines = ["", f"sweep {sweep_dir}: {len(rows)} jobs", table.rstrip(), best]
        lines.append(f"table: {sweep_dir / 'summary.md'}")
        plot = sweep_dir / PLOT_FILE
        if plots.sweep_plot(summary.swept_values(rows, monitor), monitor, plot):
            lines.append(f"plot: {plot}")
        if client is not None and parent_run_id:
            _log_to_parent(client, parent_run_id, rows, monitor, text)
            if plot.exists():
                client.log_artifact(parent_run_id, str(plot))
            exp = client.get_run(parent_run_id).info.experiment_id
            lines.append(f"MLflow parent run {parent_run_id}")
            lines.append(f"  {summary.run_url(parent_run_id, exp)}")
            lines.append(f"charts: {summary.sweep_url(exp, parent_run_id, monitor)}")
            lines.append(f"open UI: {summary.ui_command(cfg.tracking_uri)}")
        print(redact_text("\n".join(lines)), flush=True)  # the store's URI in the UI command
    except Exception as err:
        log.warning("could not report the sweep: %s", err)


def _client(cfg):  # -> mlflow.tracking.MlflowClient
    from app.tracking.mlflow import quiet_mlflow

    quiet_mlflow()
    from mlflow.tracking import MlflowClient

    return MlflowClient(cfg.tracking_uri)


def _log_to_parent(client, run_id: str, rows: list, monitor: str, text: str) -> None:
    """The table as `sweep_summary.md`, the best job as `best_*` params. Params, not metrics:
    the experiment's chart view would open on one-bar charts of the parent's `best_*` values,
    above the jobs' per-epoch curves."""
    from mlflow.entities import Param

    from app.tracking.summary import best_params_metrics

    params, metrics = best_params_metrics(rows, monitor)
    params |= {k: f"{v:.6g}" for k, v in metrics.items()}
    client.log_batch(run_id, params=[Param(k, v[:6000]) for k, v in params.items()])
    client.log_text(run_id, text, "sweep_summary.md")
