"""A real `-m` sweep ends with its table (console, summary.md, parent run); `report` reprints it."""

from __future__ import annotations

import pytest

from app.tracking.summary import sweep_url
from tests.helpers.jobs import run_app


@pytest.mark.dist
@pytest.mark.long  # make test: the same checks on test_e2e's 2-node sweep
def test_sweep_prints_table_logs_best_and_report_reads_it_back(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_app(
        "-m",
        "+experiment=smoke",
        f"output_dir={tmp_path}",
        f"dataset.root={tmp_path / 'data'}",
        f"hydra.sweep.dir={sweep}",
        "train.epochs=1",
        "model.hidden_channels=16,32",
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    header = "| job | model.hidden_channels | status   | val_acc | test_acc | train_acc | loss"
    assert f"sweep {sweep}: 2 jobs\n{header}" in out
    assert "\nbest: job " in out and "val_acc=" in out
    assert (sweep / "summary.md").read_text().count("| FINISHED |") == 2

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (parent,) = client.search_runs(
        [client.get_experiment_by_name("distgnn").experiment_id],
        filter_string=f"tags.sweep_dir = '{sweep}'",
    )
    assert parent.data.params["monitor"] == "val_acc"
    assert parent.data.params["best_job"] in ("0", "1")
    assert 0 <= float(parent.data.params["best_val_acc"]) <= 1
    assert not parent.data.metrics  # charts: the jobs' curves, no one-bar charts of the parent
    assert "sweep_summary.md" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert f"MLflow parent run {parent.info.run_id}" in out
    link = sweep_url(parent.info.experiment_id, parent.info.run_id, "val_acc")
    assert f"\ncharts: {link}\n" in out  # the jobs' curves (tests/unit/test_ui_links.py)

    again = run_app("report", str(sweep), timeout=120)
    assert again.returncode == 0, again.stderr
    assert header in again.stdout
    table = [line for line in again.stdout.splitlines() if line.startswith("| ")]
    assert [row.split("|")[2].strip() for row in table[1:]] == ["16", "32"]
