"""`hydra/sweeper=optuna` over the distgnn launcher: the objective and direction from
`train.monitor`, trials nested under the sweep's MLflow run, a resumable study beside the sweep,
a failed trial told to Optuna as FAIL (the study goes on), the sweep table and its plot."""

from __future__ import annotations

import json

import pytest
from hydra.core.utils import JobStatus
from hydra_plugins.distgnn_launcher._core import (
    BASIC_SWEEPER,
    failed_return,
    sweeper_owns_failures,
)
from omegaconf import OmegaConf

from app.tracking.summary import JobRow, sweep_direction, swept_values
from tests.helpers.jobs import run_app


def test_direction_follows_the_monitor():
    assert sweep_direction("", "node") == "maximize"  # val_acc
    assert sweep_direction("", "link") == "maximize"  # val_auc
    assert sweep_direction("loss", "node") == "minimize"
    assert sweep_direction("epoch_time_s", "node") == "minimize"


def test_the_projects_optuna_config_takes_the_monitor_and_tells_failures():
    from hydra import compose, initialize_config_dir

    import app.__main__  # noqa: F401  (registers the resolvers)
    from app.config import CONF_DIR, normalize_overrides

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "config",
            normalize_overrides(["hydra/sweeper=optuna", "train.monitor=loss"]),
            return_hydra_config=True,
        )
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper")
    assert sweeper.direction == "minimize" and sweeper.max_failure_rate == 1.0
    assert sweeper.n_jobs == 1 and OmegaConf.to_container(sweeper)["storage"].endswith("/optuna.db")
    assert sweeper_owns_failures(cfg)
    basic = OmegaConf.create({"hydra": {"sweeper": {"_target_": BASIC_SWEEPER}}})
    assert not sweeper_owns_failures(basic)


def test_a_trial_that_exits_is_a_failed_return_not_the_studys_end():
    ret = failed_return(SystemExit(2), ["train.lr=-1.0"])
    assert ret.status == JobStatus.FAILED and ret.overrides == ["train.lr=-1.0"]
    with pytest.raises(RuntimeError, match="exited with code 2"):
        _ = ret.return_value  # what the Optuna sweeper reads: it tells the trial FAIL


def test_the_sweep_plot_has_the_monitor_per_swept_value(tmp_path):
    from app.tracking.plots import sweep_plot

    rows = [
        JobRow("0", ["train.lr=0.01", "model.hidden_channels=16"], metrics={"val_acc": 0.5}),
        JobRow("1", ["train.lr=0.003", "model.hidden_channels=16"], metrics={"val_acc": 0.6}),
        JobRow("2", ["train.lr=-1", "model.hidden_channels=16"], status="FAILED"),
    ]
    swept = swept_values(rows, "val_acc")
    assert swept == {"train.lr": [("0.01", 0.5), ("0.003", 0.6)]}
    assert sweep_plot(swept, "val_acc", tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.dist
@pytest.mark.long  # four smoke trials and a resumed study: about a minute on a loaded machine
def test_a_study_of_four_trials_with_one_failing_is_nested_resumable_and_tabled(tmp_path):
    sweep = tmp_path / "sweep"
    store = f"sqlite:///{tmp_path}/mlflow.db"
    args = [
        "-m", "hydra/sweeper=optuna", "hydra/sweeper/sampler=grid", "+experiment=smoke",
        "train.epochs=1", f"output_dir={tmp_path}", f"dataset.root={tmp_path / 'data'}",
        f"mlflow.tracking_uri={store}", f"hydra.sweep.dir={sweep}",
        "train.lr=choice(0.01,0.003,0.001,-1.0)",
    ]  # fmt: skip
    proc = run_app(*args, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    import optuna

    study = optuna.load_study(study_name="distgnn", storage=f"sqlite:///{sweep}/optuna.db")
    states = sorted(t.state.name for t in study.trials)
    assert states == ["COMPLETE", "COMPLETE", "COMPLETE", "FAIL"], states
    assert study.direction.name == "MAXIMIZE"  # val_acc
    bad = next(t for t in study.trials if t.state.name == "FAIL")
    assert bad.params["train.lr"] == -1.0
    summary = (sweep / "summary.md").read_text()
    assert summary.count("FAILED") == 1 and "monitor: val_acc (best: job" in summary
    assert (sweep / "sweep_plot.png").exists()
    best = max((t for t in study.trials if t.value is not None), key=lambda t: t.value)
    result = json.loads((sweep / str(best.number) / "result.json").read_text())
    assert result["val_acc"] == pytest.approx(best.value)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name("distgnn").experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(children) >= 3  # every trial that started training, nested
    assert "sweep_plot.png" in {a.path for a in client.list_artifacts(parents[0].info.run_id)}

    again = run_app(*args, "hydra.sweeper.n_trials=1", timeout=600)  # the same study, resumed
    assert again.returncode == 0, again.stderr[-3000:]
    assert (sweep / "4" / "result.json").exists()  # the resumed trial's own dir, after the others
    assert (sweep / str(best.number) / "result.json").exists()
    assert (
        len(optuna.load_study(study_name="distgnn", storage=f"sqlite:///{sweep}/optuna.db").trials)
        == 5
    )
