"""`python -m app report`: a sweep's and an experiment's table read back from a real store."""

from __future__ import annotations

import pytest

from app.config import Config
from app.tracking.mlflow import MlflowTracker
from app.tracking.report import main as report


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A sweep dir with two jobs logged through the real tracker under one parent run."""
    root = tmp_path_factory.mktemp("out")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    sweep_dir = root / "multirun" / "2026-01-01_00-00-00"
    tracker = MlflowTracker(uri, "rep")
    parent = tracker.start_parent("sweep", tags={"sweep_dir": str(sweep_dir)})
    for job, (hidden, acc) in enumerate([(64, 0.6), (128, 0.75)]):
        job_dir = sweep_dir / str(job)
        (job_dir / ".hydra").mkdir(parents=True)
        overrides = f"- +experiment=smoke\n- model.hidden_channels={hidden}\n"
        (job_dir / ".hydra" / "overrides.yaml").write_text(overrides)
        with tracker:
            tracker.start(
                Config(experiment="smoke"), parent_run_id=parent, tags={"job_dir": str(job_dir)}
            )
            for epoch in range(2):
                tracker.log_metrics(
                    {"loss": 1.0 - epoch / 4, "val_acc": acc - 0.1 + epoch / 10}, step=epoch
                )
    tracker.end_parent(parent)
    return root, sweep_dir


def test_sweep_dir_table(sweep, capsys):
    root, sweep_dir = sweep
    assert report([str(sweep_dir)]) == 0  # the store is found above the sweep dir
    out = capsys.readouterr().out
    assert out.startswith(f"# sweep {sweep_dir}\n")
    assert "monitor: val_acc (best: job 1 (model.hidden_channels=128) val_acc=0.7500)" in out
    lines = [line for line in out.splitlines() if line.startswith("| ")]
    assert lines[0].startswith("| job | model.hidden_channels | status ")
    assert lines[1].startswith("| 0   | 64 ") and lines[2].startswith("| 1   | 128 ")
    assert lines[2].rstrip().endswith("*    |")


@pytest.mark.dist
def test_run_dir_and_experiment_csv(sweep, capsys):
    root, sweep_dir = sweep
    assert report([str(sweep_dir / "0"), "--format", "csv"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].startswith("job,status,val_acc,loss,time_s,best") and rows[1].startswith(
        "0,FINISHED,0.6,0.75,"
    )
    uri = f"sqlite:///{root / 'mlflow.db'}"
    assert report(["--experiment", "rep", "--tracking-uri", uri, "--format", "csv"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 3 and rows[0].startswith("job,model.hidden_channels,status,val_acc")


@pytest.mark.dist
def test_bad_arguments_are_one_line(sweep, tmp_path, capsys):
    root, _ = sweep
    uri = f"sqlite:///{root / 'mlflow.db'}"
    assert report([str(tmp_path), "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "neither a run dir" in err
    assert report(["--experiment", "nope", "--tracking-uri", uri]) == 2
    assert "no experiment 'nope' in the store (it has: " in capsys.readouterr().err


@pytest.fixture
def elsewhere(tmp_path):
    """A run logged to a store outside the job's output dir (a non-default tracking_uri)."""
    store = tmp_path / "stores" / "team.db"
    store.parent.mkdir()
    uri = f"sqlite:///{store}"
    job_dir = tmp_path / "out" / "runs" / "2026-01-01_00-00-00-abcdef"
    (job_dir / ".hydra").mkdir(parents=True)
    (job_dir / ".hydra" / "overrides.yaml").write_text("- experiment=smoke\n")
    tracker = MlflowTracker(uri, "team")
    with tracker:
        tracker.start(Config(experiment="smoke"), tags={"job_dir": str(job_dir)})
        tracker.log_metrics({"loss": 0.5, "val_acc": 0.8}, step=0)
    return uri, job_dir


def test_report_finds_the_store_the_run_dir_records(elsewhere, capsys):
    uri, job_dir = elsewhere
    assert not list(job_dir.parents[2].glob("**/mlflow.db"))  # nothing to find by searching
    assert report([str(job_dir), "--format", "csv"]) == 0  # via mlflow_run.json
    rows = capsys.readouterr().out.splitlines()
    assert rows[1].startswith("2026-01-01_00-00-00-abcdef,FINISHED,0.8,0.5,"), rows


def test_report_finds_the_store_in_the_dirs_config(elsewhere, capsys, monkeypatch, tmp_path):
    """Without mlflow_run.json (a job that failed before its run was recorded, a copied dir),
    the job's Hydra config names the store."""
    uri, job_dir = elsewhere
    monkeypatch.chdir(tmp_path)  # no outputs/mlflow.db to fall back on
    (job_dir / "mlflow_run.json").unlink()
    assert report([str(job_dir)]) == 2  # searched above the dir: no store there
    assert "no MLflow store at" in capsys.readouterr().err
    config = f"output_dir: {job_dir.parents[1]}\nmlflow:\n  tracking_uri: {uri}\n"
    (job_dir / ".hydra" / "config.yaml").write_text(config)
    assert report([str(job_dir), "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("2026-01-01_00-00-00-abcdef,")


@pytest.mark.dist
@pytest.mark.long  # make test: report on real jobs (test_console), the store found in-process
def test_report_on_a_real_job_with_a_non_default_store(tmp_path):
    from tests.helpers.jobs import run_app

    uri = f"sqlite:///{tmp_path / 'team' / 'store.db'}"
    (tmp_path / "team").mkdir()
    args = ("experiment=smoke", "debug=limit", f"mlflow.tracking_uri={uri}")
    job = run_app(*args, f"output_dir={tmp_path / 'out'}", f"dataset.root={tmp_path}", timeout=180)
    assert job.returncode == 0, job.stderr[-2000:]
    (job_dir,) = (tmp_path / "out" / "runs").iterdir()
    proc = run_app("report", str(job_dir), "--format", "csv", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].startswith(f"{job_dir.name},FINISHED,"), proc.stdout
