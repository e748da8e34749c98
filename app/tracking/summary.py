"""Results a person can read: the end-of-run summary and the table of a sweep's jobs.

A job's row comes from its job dir (`result.json`, `mlflow_run_id`) or from its MLflow run; a
table has one row per job, a column per override that differs between the jobs, the final
metrics and the wall time, and marks the best job by the monitored metric (`train.monitor`).
The same rows print on the launcher's console (`format_table(..., "md")`), go into the sweep's
parent run, and come back from the store with `python -m app report` (app/tracking/report.py).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from app.contract import RESULT_FILE, RUN_ID_FILE, RUN_INFO_FILE
from app.tracking.metric_keys import plain_key, stored_key
from app.tracking.progress import phases_line
from app.tracking.redact import redact_text

log = logging.getLogger("distgnn")

UI_ADDRESS = "http://127.0.0.1:5000"
# A sweep job's wall time (launcher's view), a tag on its run so `report` shows the table's
# time (a tag: as a one-value metric it would be a bar chart among the per-epoch curves).
JOB_TIME_TAG = "job_time_s"
CELL_CHARS = 100
# Columns shown when present, in this order, after the monitored metric.
METRIC_COLUMNS = (
    "val_acc",
    "test_acc",
    "val_auc",
    "test_auc",
    "val_mrr",
    "test_mrr",
    "train_acc",
    "loss",
    "epoch_time_s",
    "seeds_per_s",
)


def monitor_for(monitor: str, objective: str) -> str:
    """`monitor` if set (a system metric as MLflow shows it, `system/<name>`, is `<name>`),
    else val_auc for link objectives and val_acc otherwise."""
    if monitor:
        return plain_key(monitor)
    return "val_auc" if objective == "link" else "val_acc"


def monitor_key(cfg: Any) -> str:
    """The monitored metric of a `Config` (or a composed DictConfig): `train.monitor`."""
    return monitor_for(str(getattr(cfg.train, "monitor", "") or ""), str(cfg.train.objective))


def lower_is_better(metric: str) -> bool:
    """Losses, times and waiting fractions are minimised; everything else is maximised."""
    return "loss" in metric or metric.endswith("time_s") or "wait" in metric


def sweep_direction(monitor: str, objective: str) -> str:
    """Optuna's direction for `train.monitor` (resolver `distgnn_direction`, used by
    conf/hydra/sweeper/optuna.yaml): `minimize` for losses and times, else `maximize`."""
    return "minimize" if lower_is_better(monitor_for(monitor, objective)) else "maximize"


@dataclass
class JobRow:
    """One job (or MLflow run) of a table."""

    label: str  # job number in a sweep, run name in a report
    overrides: list[str] = field(default_factory=list)
    status: str = "FINISHED"
    metrics: dict[str, float] = field(default_factory=dict)
    time_s: float | None = None
    job_dir: str = ""
    run_id: str | None = None
    error: str = ""  # why a failed job failed (its run's `error` tag)


def read_result(job_dir: str | Path) -> dict[str, float]:
    """`<job_dir>/result.json` (written by distributed rank 0), or {}."""
    path = Path(job_dir) / RESULT_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def read_run_info(job_dir: str | Path) -> dict[str, str]:
    """`<job_dir>/mlflow_run.json` (run id and name, experiment id, store), or {}."""
    try:
        return json.loads((Path(job_dir) / RUN_INFO_FILE).read_text())
    except (OSError, ValueError):
        return {}


def read_run_id(job_dir: str | Path) -> str | None:
    """The MLflow run id the job logged to (`<job_dir>/mlflow_run_id`), or None."""
    try:
        return (Path(job_dir) / RUN_ID_FILE).read_text().strip() or None
    except OSError:
        return None


# MLflow 3's UI keeps a GenAI / model-training switch (default GenAI); the query selects the latter.
_TRAINING_VIEW = "workflowType=machine_learning"


def experiment_url(experiment_id: str, address: str = UI_ADDRESS) -> str:
    """The experiment's runs as metric charts, in the UI's model-training mode."""
    return f"{address}/#/experiments/{experiment_id}/runs?{_TRAINING_VIEW}&compareRunsMode=CHART"


def sweep_url(
    experiment_id: str, parent_run_id: str, monitor: str, address: str = UI_ADDRESS
) -> str:
    """A sweep's jobs as per-epoch metric charts, one curve per job, best job first.

    MLflow's runs view nests runs under their parent, folded and so left out of the charts,
    whenever it lists them unsorted and unfiltered or by creation time. Filtering on the
    parent's id and sorting by the monitored metric lists the jobs themselves instead (the
    charts show the first 10 rows: a larger sweep's 10 best jobs).
    """
    query = {
        "searchFilter": f"tags.mlflow.parentRunId = '{parent_run_id}'",
        "orderByKey": f"metrics.`{stored_key(monitor) or monitor}`",
        "orderByAsc": "true" if lower_is_better(monitor) else "false",
    }
    return f"{experiment_url(experiment_id, address)}&{urlencode(query, quote_via=quote)}"


def run_url(run_id: str, experiment_id: str | None = None) -> str:
    """The run's page (without the experiment id the UI redirects, in its default mode)."""
    if experiment_id is None:
        return f"{UI_ADDRESS}/#/runs/{run_id}"
    return f"{UI_ADDRESS}/#/experiments/{experiment_id}/runs/{run_id}?{_TRAINING_VIEW}"


def ui_command(tracking_uri: str) -> str:
    """The command that serves the store at UI_ADDRESS (the venv's `mlflow`, not PATH's)."""
    mlflow = Path(sys.executable).parent / "mlflow"
    return f"{mlflow} ui --backend-store-uri {tracking_uri} --host 127.0.0.1 --port 5000"


def _fmt(metric: str, value: Any) -> str:
    if not isinstance(value, int | float) or math.isnan(value):
        return "-"
    if metric.endswith("per_s"):
        return f"{value:,.0f}"
    if metric.endswith("_s"):
        return f"{value:.2f}"
    return f"{value:.4f}"


# ---------------------------------------------------------------- one run


def run_summary(cfg: Any, job_dir: str | Path, result: dict[str, float]) -> str:
    """The lines printed when a run ends: metrics, rates, where everything went."""
    metrics = {**read_result(job_dir), **{k: v for k, v in result.items() if v is not None}}
    monitor = monitor_key(cfg)
    shown = [m for m in dict.fromkeys((monitor, *METRIC_COLUMNS[:8])) if m in metrics]
    lines = ["", "=" * 72, f"distgnn: {cfg.experiment or cfg.dataset.name} finished"]
    if shown:
        lines.append("  final:     " + "  ".join(f"{m}={_fmt(m, metrics[m])}" for m in shown))
    else:  # a node other than node 0 of an env/torchrun job: the metrics are written there
        lines.append("  final:     on node 0 (this machine ran its share of the job)")
    if "epoch_time_s" in metrics:
        lines.append(
            f"  last epoch {_fmt('epoch_time_s', metrics['epoch_time_s'])} s, "
            f"{_fmt('seeds_per_s', metrics.get('seeds_per_s'))} seeds/s, "
            f"data wait {100 * metrics.get('data_wait_frac', float('nan')):.0f} %"
            + (f", evaluation {metrics['eval_time_s']:.1f} s" if "eval_time_s" in metrics else "")
        )
    if phases_line():
        lines.append(f"  startup:   {phases_line()} (timed in this process)")
    lines.append(f"  job dir:   {job_dir}")
    info = read_run_info(job_dir)
    run_id = info.get("run_id") or read_run_id(job_dir)
    if run_id:
        exp = info.get("experiment_id")
        lines.append(f"  MLflow:    run {info.get('run_name', '')} ({run_id})")
        lines.append(f"             {run_url(run_id, exp)}")
        if exp:
            lines.append(f"  charts:    {experiment_url(exp)}")
        lines.append(f"  open UI:   {ui_command(info.get('tracking_uri', cfg.tracking_uri))}")
    lines.append("=" * 72)
    return "\n".join(lines)


def print_run_summary(cfg: Any, job_dir: str | Path, result: dict[str, float] | None) -> None:
    """Print `run_summary` on stdout; a summary problem is logged, never raised."""
    try:
        print(redact_text(run_summary(cfg, job_dir, result or {})), flush=True)
    except Exception as err:  # the run itself succeeded: do not turn it into a failure
        log.warning("could not print the run summary: %s", err)


# ---------------------------------------------------------------- tables


def _override_dict(overrides: list[str]) -> dict[str, str]:
    out = {}
    for o in overrides:
        key, sep, value = o.lstrip("+~").partition("=")
        if sep:
            out[key] = value
    return out


def differing_keys(rows: list[JobRow]) -> list[str]:
    """Override keys whose value is not the same in every row (in first-seen order)."""
    dicts = [_override_dict(r.overrides) for r in rows]
    keys = list(dict.fromkeys(k for d in dicts for k in d))
    return [k for k in keys if len({d.get(k) for d in dicts}) > 1]


def swept_values(rows: list[JobRow], monitor: str) -> dict[str, list[tuple[str, float]]]:
    """Per override key that differs between rows: (its value, `monitor`) of each finished row
    that reported the monitor (the points of the sweep's plot)."""
    out: dict[str, list[tuple[str, float]]] = {}
    for key in differing_keys(rows):
        out[key] = [
            (_override_dict(r.overrides)[key], float(r.metrics[monitor]))
            for r in rows
            if r.status == "FINISHED"
            and key in _override_dict(r.overrides)
            and isinstance(r.metrics.get(monitor), int | float)
            and not math.isnan(r.metrics[monitor])
        ]
    return out


def best_index(rows: list[JobRow], monitor: str) -> int | None:
    """Index of the best FINISHED row by `monitor`, or None when no row has it."""
    scored = [
        (r.metrics[monitor], i)
        for i, r in enumerate(rows)
        if r.status == "FINISHED"
        and isinstance(r.metrics.get(monitor), int | float)
        and not math.isnan(r.metrics[monitor])
    ]
    if not scored:
        return None
    pick = min if lower_is_better(monitor) else max
    return pick(scored, key=lambda s: s[0])[1]


def table_columns(rows: list[JobRow], monitor: str) -> tuple[list[str], list[str]]:
    """(override keys that differ, metric names present in some row, monitor first)."""
    present = {k for r in rows for k in r.metrics}
    metrics = [m for m in dict.fromkeys((monitor, *METRIC_COLUMNS)) if m in present]
    return differing_keys(rows), metrics


def table_records(rows: list[JobRow], monitor: str) -> tuple[list[str], list[list[Any]]]:
    """Header and raw cells (numbers unformatted) of the table."""
    keys, metrics = table_columns(rows, monitor)
    best = best_index(rows, monitor)
    errors = any(r.error for r in rows)
    header = ["job", *keys, "status", *metrics, "time_s", "best", *(["error"] if errors else [])]
    records = []
    for i, r in enumerate(rows):
        values = _override_dict(r.overrides)
        records.append(
            [
                r.label,
                *(values.get(k, "") for k in keys),
                r.status,
                *(r.metrics.get(m) for m in metrics),
                r.time_s,
                "*" if i == best else "",
                *([r.error] if errors else []),
            ]
        )
    return header, records


def format_table(rows: list[JobRow], monitor: str, fmt: str = "md") -> str:
    """The rows as a Markdown table (`md`) or CSV (`csv`); the best job is marked `*`."""
    header, records = table_records(rows, monitor)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(["" if c is None else c for c in rec] for rec in records)
        return buf.getvalue()
    if fmt != "md":
        raise ValueError(f"format {fmt!r}: expected md or csv")
    cells = [
        [
            _fmt(h, c) if isinstance(c, int | float) or c is None else _clip(str(c))
            for h, c in zip(header, rec, strict=True)
        ]
        for rec in records
    ]
    widths = [max(len(h), *(len(row[j]) for row in cells)) for j, h in enumerate(header)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    return "\n".join(lines) + "\n"


def _clip(text: str) -> str:
    """A Markdown cell of at most CELL_CHARS (an error's whole line is in the CSV and MLflow)."""
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def best_line(rows: list[JobRow], monitor: str) -> str:
    """`best: job 1 (model.hidden_channels=128) val_acc=0.8123`, or why there is none."""
    best = best_index(rows, monitor)
    if best is None:
        return f"best: none (no finished job reported {monitor})"
    r = rows[best]
    changed = [o for o in r.overrides if o.lstrip("+~").partition("=")[0] in differing_keys(rows)]
    what = f" ({' '.join(changed)})" if changed else ""
    return f"best: job {r.label}{what} {monitor}={_fmt(monitor, r.metrics[monitor])}"


def best_params_metrics(
    rows: list[JobRow], monitor: str
) -> tuple[dict[str, str], dict[str, float]]:
    """`best_*` params (job, overrides, run id, monitor) and metrics of the best row."""
    best = best_index(rows, monitor)
    if best is None:
        return {"monitor": monitor}, {}
    r = rows[best]
    params = {
        "monitor": monitor,
        "best_job": r.label,
        "best_overrides": " ".join(r.overrides) or "-",
        "best_run_id": r.run_id or "-",
    }
    names = dict.fromkeys((monitor, *METRIC_COLUMNS))
    metrics = {f"best_{k}": float(r.metrics[k]) for k in names if k in r.metrics}
    if r.time_s is not None:
        metrics["best_time_s"] = r.time_s
    return params, metrics
