"""Checks of a finished two-job `-m` sweep over `model.hidden_channels`: the console table and
best line, summary.md, and the sweep's MLflow parent run (shared by the sweep tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.tracking.summary import sweep_url

HEADER = "| job | model.hidden_channels | status   | val_acc | test_acc | train_acc | loss"


def check_sweep_ends(out: str, sweep: Path, client: Any, parent: Any) -> None:
    """`out`: the sweep's console; `parent`: its MLflow parent run read through `client`."""
    assert f"sweep {sweep}: 2 jobs\n{HEADER}" in out
    assert "\nbest: job " in out and "val_acc=" in out
    assert (sweep / "summary.md").read_text().count("| FINISHED |") == 2
    assert parent.data.tags["sweep_dir"] == str(sweep)
    assert parent.data.params["monitor"] == "val_acc"
    assert parent.data.params["best_job"] in ("0", "1")
    assert 0 <= float(parent.data.params["best_val_acc"]) <= 1
    assert not parent.data.metrics  # charts: the jobs' curves, no one-bar charts of the parent
    assert "sweep_summary.md" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert f"MLflow parent run {parent.info.run_id}" in out
    link = sweep_url(parent.info.experiment_id, parent.info.run_id, "val_acc")
    assert f"\ncharts: {link}\n" in out  # the jobs' curves (tests/unit/test_ui_links.py)
