"""MLflow tracking against a real SQLite store in tmp_path; rank-aware logging."""

from __future__ import annotations

import logging
import multiprocessing as mp
from pathlib import Path

import pytest

from app.config import Config
from app.tracking.logging import setup_logging
from app.tracking.mlflow import (
    KIND_TAG,
    KIND_TRAINING,
    MlflowTracker,
    NullTracker,
    flatten,
    make_tracker,
)
from app.tracking.redact import redact


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    """One store for the module: creating (migrating) a SQLite store takes seconds."""
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


def client(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def test_params_metrics_artifacts_land_in_store(uri, tmp_path):
    cfg = Config()
    cfg.sampler.num_neighbors = [15, 10, 5]
    note = tmp_path / "note.txt"
    note.write_text("hello")
    with MlflowTracker(uri, "exp") as tr:
        run_id = tr.start(cfg, run_name="job0", tags={"kind": "unit"})
        tr.log_metrics({"loss": 1.5, "val_acc": 0.25}, step=0)
        tr.log_metrics({"loss": 0.5, "val_acc": float("nan")}, step=1)
        tr.log_artifact(note)
        tr.log_text("a: 1\n", "config.yaml")
    run = client(uri).get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "job0"
    assert run.data.params["dataset.num_nodes"] == "100000"
    assert run.data.params["sampler.num_neighbors"] == "[15, 10, 5]"
    assert run.data.tags["kind"] == "unit"
    history = client(uri).get_metric_history(run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(0, 1.5), (1, 0.5)]
    assert run.data.metrics["val_acc"] == 0.25  # NaN was skipped
    names = {a.path for a in client(uri).list_artifacts(run_id)}
    assert names == {"note.txt", "config.yaml", "learning_curves.png"}
    assert (
        Path(uri[len("sqlite:///") :]).parent / "artifacts" / "exp"
    ).is_dir()  # artifacts next to the DB, not in cwd


def test_exception_ends_run_failed_with_error_tag(uri):
    tr = MlflowTracker(uri)
    with pytest.raises(ValueError, match="boom"), tr:
        run_id = tr.start(None)
        raise ValueError("boom")
    run = client(uri).get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == "ValueError: boom"


def test_keyboard_interrupt_ends_run_killed(uri):
    tr = MlflowTracker(uri)
    with pytest.raises(KeyboardInterrupt), tr:
        run_id = tr.start(None)
        raise KeyboardInterrupt
    assert client(uri).get_run(run_id).info.status == "KILLED"


def test_nested_parent_and_children(uri):
    tr = MlflowTracker(uri)
    parent = tr.start_parent("sweep")
    children = []
    for i in range(2):
        with tr:
            children.append(tr.start(None, run_name=f"job{i}", parent_run_id=parent))
    tr.end_parent(parent)
    found = client(uri).search_runs(
        [tr.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent}'"
    )
    assert sorted(r.info.run_id for r in found) == sorted(children)
    assert client(uri).get_run(parent).info.status == "FINISHED"


def test_start_twice_without_end_is_an_error(uri):
    tr = MlflowTracker(uri)
    tr.start(None)
    with pytest.raises(RuntimeError, match="still open"):
        tr.start(None)
    tr.end()


def _create_run(uri: str, go, index: int) -> None:
    from app.tracking.mlflow import MlflowTracker

    go.wait(60)  # all processes are up: open the fresh store at the same moment
    with MlflowTracker(uri, "race") as tr:
        tr.start(None, run_name=f"p{index}")
        tr.log_metrics({"x": float(index)}, step=0)


@pytest.mark.dist
def test_concurrent_store_creation(tmp_path):
    uri = f"sqlite:///{tmp_path / 'fresh.db'}"
    import mlflow.tracking  # noqa: F401  (forked children start with MLflow imported)

    ctx = mp.get_context("fork")
    go = ctx.Event()
    procs = [ctx.Process(target=_create_run, args=(uri, go, i)) for i in range(3)]
    for p in procs:
        p.start()
    go.set()
    try:
        for p in procs:
            p.join(timeout=90)
        assert [p.exitcode for p in procs] == [0, 0, 0]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    exp = client(uri).get_experiment_by_name("race")
    runs = client(uri).search_runs([exp.experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["p0", "p1", "p2"]
    assert all(r.info.status == "FINISHED" for r in runs)


def test_null_tracker_and_rank_selection(uri):
    cfg = Config()
    cfg.mlflow.tracking_uri = uri
    assert isinstance(make_tracker(cfg, rank=1), NullTracker)
    cfg.mlflow.enabled = False
    assert isinstance(make_tracker(cfg, rank=0), NullTracker)
    with NullTracker() as tr:
        assert tr.start(cfg) is None
        tr.log_metrics({"a": 1.0}, step=0)


def test_flatten_nested_config():
    flat = flatten(Config())
    assert flat["model.hidden_channels"] == 256 and flat["train.lr"] == 0.003
    top = ("task", "seed", "output_dir", "experiment", "ckpt_path")
    assert all("." in k for k in flat if k not in top)


def test_logging_prefixes_role_and_rank(tmp_path):
    log = setup_logging("trainer1.0", log_dir=tmp_path / "logs")
    logging.getLogger("distgnn.train").info("epoch %d", 3)
    setup_logging("trainer1.0", log_dir=tmp_path / "logs")  # idempotent: no duplicate lines
    log.warning("done")
    lines = (tmp_path / "logs" / "trainer1.0.log").read_text().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[trainer1.0] ") and lines[0].endswith("distgnn.train: epoch 3")
    assert " W distgnn: done" in lines[1]


def test_experiment_is_a_training_experiment(uri):
    from mlflow.tracking import MlflowClient

    plain = MlflowClient(uri).create_experiment("made-elsewhere")  # no kind tag
    MlflowTracker(uri, "fresh")
    MlflowTracker(uri, "made-elsewhere")
    for exp_id in (MlflowTracker(uri, "fresh").experiment_id, plain):
        assert client(uri).get_experiment(exp_id).tags[KIND_TAG] == KIND_TRAINING


def test_partition_stats_become_params_json_and_one_png(uri):
    """Both naming schemes (partition task, training runs) end up as the same params."""
    task_style = {"partition/edge_cut": 40.0, "partition/part0_nodes": 6.0}
    task_style |= {"partition/part1_nodes": 4.0, "partition/part1_halo": 3.0}
    train_style = {"partition.edge_cut": 40, "partition.part0.nodes": 6, "partition.part1.nodes": 4}
    train_style["partition.part1.halo"] = 3
    params = []
    for flat in (task_style, train_style):
        with MlflowTracker(uri, "parts") as tr:
            run_id = tr.start(None)
            tr.log_metrics({**flat, "loss": 1.0}, step=0)
        run = client(uri).get_run(run_id)
        assert not any(k.startswith("partition") for k in run.data.metrics)
        params.append({k: v for k, v in run.data.params.items() if k.startswith("partition")})
        arts = {a.path for a in client(uri).list_artifacts(run_id)}
        assert {"partition_stats.json", "partition_stats.png"} <= arts
    assert (
        params[0]
        == params[1]
        == {
            "partition_stats.edge_cut": "40",
            "partition_stats.num_parts": "2",
        }
    )


def test_failed_run_in_finally_gets_first_error_line(uri):
    """Trainers end their run from a `finally:` with only a status: the error is still tagged."""
    tr = MlflowTracker(uri, "errors")
    run_id = tr.start(None)
    with pytest.raises(RuntimeError):
        try:
            raise RuntimeError("peer sampler1.0 died\n  traceback line\n")
        finally:
            tr.end("FAILED")
    assert client(uri).get_run(run_id).data.tags["error"] == "RuntimeError: peer sampler1.0 died"


def test_run_names_readable_unique_and_run_id_file(uri, tmp_path):
    (tmp_path / ".hydra").mkdir()
    overrides = "- +experiment=smoke\n- model.hidden_channels=64\n- output_dir=/x\n"
    (tmp_path / ".hydra" / "overrides.yaml").write_text(overrides)
    cfg = Config(experiment="smoke")
    names = []
    for _ in range(2):
        with MlflowTracker(uri, "names") as tr:
            run_id = tr.start(cfg, tags={"job_dir": str(tmp_path)})
            assert (tmp_path / "mlflow_run_id").read_text() == run_id
        run = client(uri).get_run(run_id)
        names.append(run.info.run_name)
        assert (
            run.data.tags["overrides"] == "+experiment=smoke model.hidden_channels=64 output_dir=/x"
        )
    assert names[0] != names[1]
    assert all(n.startswith("smoke-hidden_channels=64-") and len(n) == 31 for n in names)


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("mlflow.tracking_uri", "http://bob:s3cret@host:5000", "http://***@host:5000"),
        ("mlflow.tracking_uri", "sqlite:////tmp/mlflow.db", "sqlite:////tmp/mlflow.db"),
        ("cluster.ssh_cmd", "ssh -i ~/.ssh/id_ed25519 -p 22", "ssh -i *** -p 22"),
        ("cluster.ssh_cmd", "ssh -o IdentityFile=/k/id", "ssh -o IdentityFile=***"),
        ("db.password", "hunter2", "***"),
    ],
)
def test_credentials_are_masked(key, value, shown):
    assert redact(key, value) == shown


def test_masked_in_the_store(uri):
    cfg = Config()
    cfg.mlflow.tracking_uri = "postgresql://u:pw@db/mlflow"
    with MlflowTracker(uri, "mask") as tr:
        run_id = tr.start(cfg)
    assert (
        client(uri).get_run(run_id).data.params["mlflow.tracking_uri"]
        == "postgresql://***@db/mlflow"
    )


def test_fresh_stores_copy_a_migrated_template(tmp_path, monkeypatch):
    from app.tracking.store_template import template_path

    monkeypatch.setenv("DISTGNN_CACHE_DIR", str(tmp_path / "cache"))
    MlflowTracker(f"sqlite:///{tmp_path / 'first.db'}", "a")  # migrates, keeps the template
    assert template_path().is_file()
    second = f"sqlite:///{tmp_path / 'second.db'}"
    with MlflowTracker(second, "b") as tr:  # a copy of the template
        run_id = tr.start(None)
        tr.log_metrics({"loss": 2.0}, step=0)
    assert client(second).get_run(run_id).data.metrics["loss"] == 2.0
    assert [e.name for e in client(second).search_experiments()] == ["b", "Default"]


@pytest.mark.dist
def test_a_store_that_cannot_be_opened_is_one_line_at_once(tmp_path):
    """A folder where the SQLite file should be: MLflow would retry opening it for ~100 s and
    end in a SQLAlchemy traceback; the job says so in one line instead, before any work."""
    from app.config import ConfigError
    from tests.helpers.jobs import run_app

    (tmp_path / "m.db").mkdir()
    uri = f"sqlite:///{tmp_path}/m.db"
    with pytest.raises(ConfigError, match=r"m\.db is not a file"):
        MlflowTracker(uri)
    proc = run_app(
        "+experiment=smoke", f"output_dir={tmp_path}", f"dataset.root={tmp_path}/data",
        f"mlflow.tracking_uri={uri}", f"hydra.run.dir={tmp_path}/run", timeout=60,
    )  # fmt: skip
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("config error: mlflow.tracking_uri=") and "not a file" in lines[0]
