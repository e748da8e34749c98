"""The summaries' links open what they promise in MLflow's UI (headless Chromium, real server).

Opt-in like `make ui-check`: skipped without a `chromium` binary; `long` (the server takes 20 s
to minutes to start), so `make chaos` runs it.
"""

from __future__ import annotations

import shutil
import time

import pytest

pytestmark = [
    pytest.mark.dist,
    pytest.mark.long,
    pytest.mark.skipif(
        not (shutil.which("chromium") or shutil.which("chromium-browser")),
        reason="needs a chromium binary (apt-get install chromium)",
    ),
]
# The run names of the traces of every drawn chart (plotly keeps its traces on the element).
TRACE_NAMES = """Array.from(document.querySelectorAll('.js-plotly-plot'))
  .map(p => (p.data || []).map(t => t.name))"""


def _sweep_store(tmp_path) -> tuple[str, str, str]:
    """(store, experiment id, parent run id): a single run and a 3-job sweep, 3 epochs each."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    db = tmp_path / "mlflow.db"
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.create_experiment("distgnn")
    single = client.create_run(exp, run_name="single").info.run_id
    parent = client.create_run(exp, run_name="sweep").info.run_id
    jobs = [(single, "single", 0.0)]
    for j in range(3):
        tags = {"mlflow.parentRunId": parent}
        run = client.create_run(exp, run_name=f"job{j}", tags=tags).info.run_id
        jobs.append((run, f"job{j}", 0.1 * j))
    now = int(time.time() * 1000)
    for run, _, shift in jobs:
        history = [Metric("val_acc", 0.2 * s + shift, now, s) for s in range(3)]
        client.log_batch(run, metrics=history)
        client.set_terminated(run)
    client.set_terminated(parent)
    return str(db), exp, parent


def test_sweep_link_charts_each_jobs_curves_best_first(tmp_path):
    from pathlib import Path

    from app.tracking.summary import sweep_url
    from app.tracking.ui import ROWS_SHOWN, chromium, free_port, mlflow_ui
    from app.tracking.ui_browser import Chromium

    db, exp, parent = _sweep_store(tmp_path)
    with mlflow_ui(Path(db), free_port(), tmp_path / "ui.log") as address:
        with Chromium(chromium()) as page:
            page.open_when_ready(sweep_url(exp, parent, "val_acc", address), ROWS_SHOWN, 300)
            page.wait_until("document.querySelectorAll('.js-plotly-plot').length >= 1", 300)
            rows = page.evaluate(
                "Array.from(document.querySelectorAll('.ag-row')).map(r => r.innerText)"
            )
            traces = page.evaluate(TRACE_NAMES)
    names = [line.split()[-1] for line in rows if line.strip()]
    assert names == ["job2", "job1", "job0"]  # the jobs themselves, best val_acc first
    # one chart (val_acc) with each job's curve (plotly draws a run as more than one trace)
    assert [list(dict.fromkeys(chart)) for chart in traces] == [["job2", "job1", "job0"]]
