"""End-of-run summary and sweep tables, from runs made by the real tracker in a SQLite store."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest

from app.config import Config
from app.tracking.mlflow import MlflowTracker
from app.tracking.summary import (
    JobRow,
    best_index,
    best_params_metrics,
    differing_keys,
    experiment_url,
    format_table,
    monitor_key,
    run_summary,
    sweep_url,
)


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


def test_run_summary_names_metrics_dir_run_and_ui(uri, tmp_path):
    cfg = Config(experiment="smoke")
    cfg.mlflow.tracking_uri = uri
    with MlflowTracker(uri) as tr:
        run_id = tr.start(cfg, tags={"job_dir": str(tmp_path)})
    result = {"loss": 0.5, "val_acc": 0.81, "test_acc": 0.8, "epoch_time_s": 1.25}
    (tmp_path / "result.json").write_text(json.dumps({**result, "seeds_per_s": 12345.6}))
    text = run_summary(cfg, tmp_path, {"data_wait_frac": 0.25})
    assert "val_acc=0.8100  test_acc=0.8000" in text and "loss=0.5000" in text
    assert "last epoch 1.25 s, 12,346 seeds/s, data wait 25 %" in text
    assert f"job dir:   {tmp_path}" in text
    assert (
        f"(#{run_id})" not in text and f"/#/experiments/{tr.experiment_id}/runs/{run_id}?" in text
    )
    assert f"/#/experiments/{tr.experiment_id}/runs?workflowType=machine_learning" in text
    assert f"ui --backend-store-uri {uri} --host 127.0.0.1 --port 5000" in text


def _rows() -> list[JobRow]:
    common = ["+experiment=smoke", "train.epochs=1"]
    return [
        JobRow(
            "0",
            [*common, "model.hidden_channels=64", "train.lr=0.01"],
            metrics={"val_acc": 0.5, "loss": 1.0},
            time_s=3.0,
        ),
        JobRow(
            "1",
            [*common, "model.hidden_channels=128", "train.lr=0.01"],
            metrics={"val_acc": 0.7, "loss": 2.0},
            time_s=4.0,
        ),
        JobRow("2", [*common, "model.hidden_channels=64", "train.lr=0.1"], status="FAILED"),
    ]


def test_table_shows_differing_overrides_and_marks_the_best():
    rows = _rows()
    assert differing_keys(rows) == ["model.hidden_channels", "train.lr"]
    md = format_table(rows, "val_acc").splitlines()
    assert md[0].split("|")[1:-1] == [
        " job ",
        " model.hidden_channels ",
        " train.lr ",
        " status   ",
        " val_acc ",
        " loss   ",
        " time_s ",
        " best ",
    ]
    assert "| 1   | 128 " in md[3] and md[3].rstrip().endswith("| *    |")
    assert "FAILED" in md[4] and "| -       | -      |" in md[4]
    csv = format_table(rows, "val_acc", "csv").splitlines()
    assert csv[0] == "job,model.hidden_channels,train.lr,status,val_acc,loss,time_s,best"
    assert csv[2] == "1,128,0.01,FINISHED,0.7,2.0,4.0,*"
    assert best_index(rows, "loss") == 0  # losses are minimised


def test_best_params_metrics_and_monitor_defaults():
    params, metrics = best_params_metrics(_rows(), "val_acc")
    assert params["best_job"] == "1" and "model.hidden_channels=128" in params["best_overrides"]
    assert metrics == {"best_val_acc": 0.7, "best_loss": 2.0, "best_time_s": 4.0}
    cfg = Config()
    assert monitor_key(cfg) == "val_acc"
    cfg.train.objective = "link"
    assert monitor_key(cfg) == "val_auc"
    cfg.train.monitor = "test_mrr"
    assert monitor_key(cfg) == "test_mrr"


def test_startup_phases_logged_on_the_run(uri):
    import time

    from app.tracking.progress import phase, phases_line

    with phase("dataset"):
        time.sleep(0.15)
    with phase("build task (RPC join)"):  # the distributed trainer's: MLflow refuses "(" in keys
        pass
    assert "dataset 0.1 s" in phases_line() or "dataset 0.2 s" in phases_line()
    with MlflowTracker(uri) as tr:
        run_id = tr.start(None)
    from mlflow.tracking import MlflowClient

    run = MlflowClient(uri).get_run(run_id)
    assert run.data.metrics["system/startup_s"] >= 0
    want = {"startup.dataset_s", "startup.mlflow_store_s", "startup.build_task_RPC_join_s"}
    assert want <= set(run.data.params)


def test_failed_rows_carry_their_reason_clipped_in_markdown_whole_in_csv():
    rows = _rows()
    reason = "trainer0-0 failed (exit code 1): ValueError: " + "x" * 200
    rows[2].error = reason
    md = format_table(rows, "val_acc").splitlines()
    assert md[0].split("|")[-2].strip() == "error" and len(md[4].split("|")[-2]) == 102
    assert "ValueError: xxx" in md[4] and md[4].rstrip().endswith("… |")
    csv = format_table(rows, "val_acc", "csv").splitlines()
    assert csv[0].endswith(",best,error") and csv[3].endswith(reason)
    assert csv[1].endswith(",")  # finished jobs: an empty error cell


def test_a_node_without_metrics_says_where_they_are(tmp_path):
    text = run_summary(Config(experiment="smoke"), tmp_path, {})
    final = next(line for line in text.splitlines() if "final:" in line)
    assert final.split("final:")[1].strip() == "on node 0 (this machine ran its share of the job)"


@pytest.mark.dist
def test_help_lists_commands_experiments_and_groups_without_schema():
    from tests.helpers.jobs import run_app

    proc = run_app("--help", timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith("distgnn: ") and "__main__" not in text and "schema" not in text
    assert "distgnn report " in text and "+experiment=NAME" in text and "smoke" in text
    assert "  model: gat, gcn, mlp, sage" in text


def test_sweep_link_lists_the_jobs_themselves_best_first(tmp_path):
    """The sweep's `charts:` link: the experiment's chart view filtered on the parent (its
    filter selects exactly the jobs in a real store) and sorted by the monitored metric, which
    keeps MLflow from folding the jobs under their parent (folded runs are not charted)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("distgnn")
    client.create_run(exp, run_name="single")
    parent = client.create_run(exp, run_name="sweep").info.run_id
    jobs = {
        client.create_run(exp, tags={"mlflow.parentRunId": parent}).info.run_id for _ in range(2)
    }
    url = sweep_url(exp, parent, "val_acc", address="http://h:1")
    assert url.startswith(experiment_url(exp, "http://h:1") + "&")
    params = parse_qs(urlsplit(url).fragment.partition("?")[2], strict_parsing=True)
    assert params["compareRunsMode"] == ["CHART"]
    assert params["orderByKey"] == ["metrics.`val_acc`"] and params["orderByAsc"] == ["false"]
    (search,) = params["searchFilter"]
    assert {r.info.run_id for r in client.search_runs([exp], filter_string=search)} == jobs
    assert sweep_url(exp, parent, "loss").endswith("orderByAsc=true")  # a loss: lowest first
