"""`python -m app report [RUN_DIR | SWEEP_DIR | --experiment NAME] [--format md|csv]`.

The tables of `app.tracking.summary`, rebuilt from the MLflow store rather than from a console
scroll-back, so results can be pasted into a paper or compared across days:
- a run dir (`<job dir>/mlflow_run_id`): that run as a one-row table;
- a sweep dir (`hydra.sweep.dir`): its parent run's children, one row per job;
- `--experiment NAME`: the newest `--limit` runs of the experiment (sweep parents left out).
The store is `--tracking-uri`, else the one the job used, as the dir records it (`recorded_store`:
a job's `mlflow_run.json`, else its config's `mlflow.tracking_uri` or `<output_dir>/mlflow.db`),
else the `mlflow.db` found in the dir or up to three levels above it, else `outputs/mlflow.db`
(the default `output_dir`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from app.tracking.metric_keys import plain_metrics
from app.tracking.summary import (
    JOB_TIME_TAG,
    JobRow,
    best_line,
    format_table,
    monitor_for,
    read_run_id,
    read_run_info,
)

SWEEP_TAG = "sweep_dir"  # set on a sweep's parent run by the launcher plugin


class ReportError(Exception):
    """Nothing to report for the given arguments; the message says what was looked for."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m app report", description=__doc__.split("\n\n")[0].strip("`")
    )
    parser.add_argument("path", nargs="?", help="a run dir or a sweep dir")
    parser.add_argument("--experiment", help="every run of this MLflow experiment")
    parser.add_argument("--format", choices=("md", "csv"), default="md")
    parser.add_argument("--tracking-uri", help="MLflow store (default: see above)")
    parser.add_argument("--limit", type=int, default=50, help="runs shown with --experiment")
    args = parser.parse_args(argv)
    if bool(args.path) == bool(args.experiment):
        parser.error("give a run dir, a sweep dir, or --experiment NAME (one of them)")
    return args


CONFIG_FILES = ("config.yaml", ".hydra/config.yaml", "multirun.yaml")  # job, Hydra, sweep


def _job_dirs(path: Path) -> list[Path]:
    """`path` and, for a sweep dir, its numbered job dirs in order."""
    jobs = sorted((p for p in path.glob("[0-9]*") if p.name.isdigit()), key=lambda p: int(p.name))
    return [path, *jobs]


def _configured_store(config: Path) -> str | None:
    """The store a saved job config names: `mlflow.tracking_uri`, else the `mlflow.db` under
    its `output_dir` when that file exists (an output_dir relative to where the job ran)."""
    from omegaconf import OmegaConf

    try:
        node = OmegaConf.load(config)
        uri = OmegaConf.select(node, "mlflow.tracking_uri", default=None)
        out = OmegaConf.select(node, "output_dir", default=None)
    except Exception:  # unreadable or not a job config: the next source decides
        return None
    if uri:
        return str(uri)
    db = Path(str(out or "")) / "mlflow.db"
    return f"sqlite:///{db.resolve()}" if out and db.is_file() else None


def recorded_store(path: Path) -> str | None:
    """The store the job (or a sweep's jobs) in `path` logged to, as the dir records it: the
    `tracking_uri` of `mlflow_run.json`, else the config's (see `_configured_store`)."""
    for job in _job_dirs(path):
        uri = read_run_info(job).get("tracking_uri")
        if uri:
            return str(uri)
    for job in _job_dirs(path):
        for name in CONFIG_FILES:
            if (job / name).is_file():
                uri = _configured_store(job / name)
                if uri:
                    return uri
    return None


def find_store(path: Path | None) -> str:
    """The store `path` records (`recorded_store`), else the sqlite URI of the `mlflow.db` at
    or above `path` (3 levels), else outputs/mlflow.db."""
    if path is not None and path.is_dir():
        recorded = recorded_store(path)
        if recorded:
            return recorded
    if path is not None:
        for folder in [path, *list(path.parents)[:3]]:
            if (folder / "mlflow.db").is_file():
                return f"sqlite:///{(folder / 'mlflow.db').resolve()}"
    return f"sqlite:///{Path('outputs/mlflow.db').resolve()}"


def row_of(run: Any, label: str | None = None) -> JobRow:
    """A table row from an MLflow run: its overrides tag, latest metrics, wall time (the sweep
    launcher's `job_time_s` tag where it set one, as its table showed), `error` tag."""
    info, data = run.info, run.data
    seconds = (info.end_time - info.start_time) / 1000 if info.end_time else None
    if JOB_TIME_TAG in data.tags:
        seconds = float(data.tags[JOB_TIME_TAG])
    return JobRow(
        label=label or info.run_name,
        overrides=data.tags.get("overrides", "").split(),
        status=info.status,
        metrics=plain_metrics(data.metrics),
        time_s=seconds,
        job_dir=data.tags.get("job_dir", ""),
        run_id=info.run_id,
        error=data.tags.get("error", ""),
    )


def _monitor(run: Any) -> str:
    """The run's monitored metric, from its logged `train.*` params."""
    params = run.data.params
    return monitor_for(params.get("train.monitor", ""), params.get("train.objective", "node"))


def _job_number(row: JobRow) -> tuple[int, str]:
    name = Path(row.job_dir).name
    return (int(name), name) if name.isdigit() else (1 << 30, row.label)


def collect(client: Any, args: argparse.Namespace) -> tuple[list[Any], list[JobRow], str]:
    """(runs, rows, title) for the arguments; ReportError when nothing matches."""
    if args.experiment:
        exp = client.get_experiment_by_name(args.experiment)
        if exp is None:
            names = ", ".join(e.name for e in client.search_experiments())
            raise ReportError(f"no experiment {args.experiment!r} in the store (it has: {names})")
        runs = client.search_runs(
            [exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=args.limit
        )
        runs = [r for r in runs if SWEEP_TAG not in r.data.tags]
        return runs, [row_of(r) for r in runs], f"experiment {args.experiment}"
    path = Path(args.path).resolve()
    if not path.is_dir():
        raise ReportError(f"{args.path}: no such directory (give a run dir or a sweep dir)")
    run_id = read_run_id(path)
    if run_id:
        run = client.get_run(run_id)
        return [run], [row_of(run, Path(run.data.tags.get("job_dir", path)).name)], f"run {path}"
    found = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        filter_string=f"tags.{SWEEP_TAG} = '{path}'",
    )
    if not found:
        raise ReportError(
            f"{args.path}: neither a run dir (no mlflow_run_id) nor a sweep dir known to "
            f"{client.tracking_uri} (pass --tracking-uri if the store is elsewhere)"
        )
    parent = found[0].info.run_id
    runs = client.search_runs(
        [found[0].info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent}'"
    )
    rows = sorted(
        (row_of(r, Path(r.data.tags.get("job_dir", "")).name or None) for r in runs),
        key=_job_number,
    )
    by_id = {r.info.run_id: r for r in runs}
    return [by_id[row.run_id] for row in rows], rows, f"sweep {path}"


def report(args: argparse.Namespace) -> str:
    """The table for `args` as text (Markdown with a title and the best job, or CSV)."""
    from app.tracking.mlflow import quiet_mlflow

    quiet_mlflow()
    from mlflow.tracking import MlflowClient

    uri = args.tracking_uri or find_store(Path(args.path) if args.path else None)
    db = uri[len("sqlite:///") :] if uri.startswith("sqlite:///") else None
    if db is not None and not Path(db).is_file():
        raise ReportError(f"no MLflow store at {db} (pass --tracking-uri)")
    client = MlflowClient(uri)
    runs, rows, title = collect(client, args)
    if not rows:
        raise ReportError(f"{title}: no runs")
    monitor = _monitor(runs[0])
    table = format_table(rows, monitor, args.format)
    if args.format == "csv":
        return table
    return f"# {title}\n\nmonitor: {monitor} ({best_line(rows, monitor)})\n\n{table}"


def main(argv: list[str]) -> int:
    """Print the report; a bad argument is one line on stderr and exit status 2."""
    try:
        print(report(parse_args(argv)), end="", flush=True)
    except ReportError as err:
        print(f"report: {err}", file=sys.stderr)
        return 2
    return 0
