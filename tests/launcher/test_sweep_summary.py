"""A real `-m` sweep ends with its table (console, summary.md, parent run); `report` reprints it."""

from __future__ import annotations

import pytest

from tests.helpers.jobs import run_app
from tests.helpers.sweeps import HEADER, check_sweep_ends


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
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (parent,) = client.search_runs(
        [client.get_experiment_by_name("distgnn").experiment_id],
        filter_string=f"tags.sweep_dir = '{sweep}'",
    )
    check_sweep_ends(proc.stdout, sweep, client, parent)

    again = run_app("report", str(sweep), timeout=120)
    assert again.returncode == 0, again.stderr
    assert HEADER in again.stdout
    table = [line for line in again.stdout.splitlines() if line.startswith("| ")]
    assert [row.split("|")[2].strip() for row in table[1:]] == ["16", "32"]
