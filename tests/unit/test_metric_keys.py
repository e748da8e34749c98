"""MLflow's chart view opens on the training metrics: a real fit's keys, grouped by the UI's rule
(app/tracking/metric_keys.py), put loss and the monitored metric in the first section and every
timing, rate and traffic number in "System metrics"; result.json, the table and `report` keep
the plain names."""

from __future__ import annotations

import pytest

from app.config import ConfigError, validate
from app.tracking.metric_keys import (
    MODEL_SECTION,
    SYSTEM_SECTION,
    chart_sections,
    plain_metrics,
    stored_key,
)
from app.tracking.mlflow import MlflowTracker
from app.tracking.summary import monitor_for, sweep_url
from app.tracking.ui_layout import section_problems
from app.train.loop import FitOptions, fit
from app.train.switches import SwitchOptions
from tests.helpers.toy import toy_config, toy_graph


def test_a_real_fits_store_opens_on_loss_and_the_monitor(tmp_path):
    from mlflow.tracking import MlflowClient

    from app.task.local import LocalSource
    from app.task.node import NodeTask

    cfg = toy_config(0, 64)
    task = NodeTask(cfg, LocalSource(cfg, toy_graph(num_nodes=300, seed=1)))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    opts = FitOptions(epochs=2, switches=SwitchOptions(epochs=2, scheduler="cosine"))
    with MlflowTracker(uri, "charts") as tracker:
        run_id = tracker.start(cfg)
        final = fit(task, opts, tracker=tracker)
    run = MlflowClient(uri).get_run(run_id)
    sections = chart_sections(run.data.metrics)
    assert [name for name, _ in sections] == [MODEL_SECTION, SYSTEM_SECTION]
    model, system = (keys for _, keys in sections)
    assert model == ["loss", "lr", "test_acc", "train_acc", "val_acc"]
    assert {"system/data_wait_frac", "system/epoch_time_s", "system/eval_time_s"} <= set(system)
    assert {"system/seeds_per_s", "system/steps", "system/startup_s"} <= set(system)
    assert "epoch" not in run.data.metrics  # each point's step already
    assert section_problems(sections, monitor_for("", "node")) == []
    plain = plain_metrics(run.data.metrics)  # as `report` reads the run: result.json's names
    assert {k: plain[k] for k in final if k != "epoch"} == pytest.approx(
        {k: v for k, v in final.items() if k != "epoch"}
    )


def test_every_other_name_is_a_system_metric_in_one_section():
    assert stored_key("peak_pss_gib/host1") == "system/peak_pss_gib_host1"
    assert stored_key("wire_sent_bytes_per_batch_h0") == "system/wire_sent_bytes_per_batch_h0"
    assert stored_key("cache_hit_rate") == "system/cache_hit_rate"
    assert stored_key("val_mrr") == "val_mrr" and stored_key("emb_change.paper") == (
        "emb_change.paper"
    )
    assert stored_key("epoch") is None
    keys = ["val_acc", "loss", "partition/x"]  # a prefix of its own sorts first
    assert chart_sections(keys) == [
        ("partition", ["partition/x"]),
        (MODEL_SECTION, ["loss", "val_acc"]),
        (SYSTEM_SECTION, []),  # always drawn
    ]
    assert section_problems(chart_sections(keys), "val_acc") == [
        "first chart section is 'partition'",
        "loss not in the first section (partition)",
        "val_acc not in the first section (partition)",
    ]


def test_monitor_names_as_users_write_them():
    """`system/<name>` (MLflow's key) is the plain name; Lightning-template style `val/acc` is
    one line naming the fix; the sweep's charts sort by the stored key."""
    assert monitor_for("system/epoch_time_s", "node") == "epoch_time_s"
    cfg = toy_config()
    cfg.train.monitor = "val/acc"
    with pytest.raises(ConfigError, match=r"^train.monitor='val/acc': .* train.monitor=val_acc$"):
        validate(cfg)
    assert "metrics.%60system%2Fepoch_time_s%60" in sweep_url("1", "r", "epoch_time_s")
