"""Each host's peak PSS (all its job processes) in `result.json` and the job's MLflow run."""

from __future__ import annotations

import json

import pytest

from tests.helpers.jobs import run_app

pytestmark = [pytest.mark.dist, pytest.mark.long]  # a 2-node job with sampler processes


def test_peak_pss_per_host_in_result_and_mlflow(tmp_path):
    from mlflow.tracking import MlflowClient

    job, uri = tmp_path / "job", f"sqlite:///{tmp_path}/mlflow.db"
    proc = run_app(
        "+experiment=smoke", "cluster.num_nodes=2", "loader.num_workers=1", "train.epochs=1",
        f"output_dir={tmp_path}", f"dataset.root={tmp_path / 'data'}",
        f"mlflow.tracking_uri={uri}", f"hydra.run.dir={job}", timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((job / "result.json").read_text())
    hosts = [result["peak_pss_gib/host0"], result["peak_pss_gib/host1"]]
    assert result["peak_pss_gib"] == max(hosts)
    # host 0: the launcher, a trainer and its sampler process; host 1: a trainer and a sampler.
    # Each is at least an interpreter with torch (~150 MB PSS), and far below the machine.
    assert all(0.3 < h < 8 for h in hosts), hosts
    run = MlflowClient(tracking_uri=uri).get_run((job / "mlflow_run_id").read_text().strip())
    assert run.data.metrics["system/peak_pss_gib_host1"] == pytest.approx(hosts[1])
    assert run.data.metrics["system/peak_pss_gib"] == pytest.approx(max(hosts))
    assert "peak PSS per host: host0 " in proc.stdout + proc.stderr
    assert json.loads((job / "peak_pss-0.json").read_text())["peak_pss_gib"] == max(hosts)
