"""A 2-node job whose trainers hold their rows on their device (`app.distributed.resident`).

`DISTGNN_KERNELS=torch` runs a GPU trainer's path on the CPU: each trainer copies its
partition's and its node's cache rows into its "device" table, its sampler processes send only
the other rows, and the trainer fills each batch. The same job with `train.gpu_feature_bytes=0`
(no row held, every row sent) gives the same batches, so both train to the same metrics; the
held job logs its hit rate.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.config import KERNELS_ENV

pytestmark = [pytest.mark.dist, pytest.mark.long]


def _job(compose, tmp: Path, name: str, *overrides: str) -> tuple[dict, str]:
    from app.launch import run_job

    cfg = compose(
        "+experiment=smoke", "cluster.num_nodes=2", "loader.num_workers=1", "train.epochs=3",
        "sampler.feature_cache_size=100", "sampler.hot_cache_bytes=4000", "loader.batch_size=32",
        f"output_dir={tmp}", f"dataset.root={tmp}/data", "mlflow.enabled=false", *overrides,
    )  # fmt: skip
    result = run_job(cfg, tmp / name)
    logs = "".join(p.read_text() for p in sorted((tmp / name / "logs").glob("trainer*.log")))
    return result, logs


def test_held_rows_train_as_sent_rows(tmp_path, compose, monkeypatch):
    monkeypatch.setenv(KERNELS_ENV, "torch")
    sent, sent_logs = _job(compose, tmp_path, "sent", "train.gpu_feature_bytes=0")
    held, held_logs = _job(compose, tmp_path, "held")
    assert re.search(r"features: 0 of \d+ partition and cache rows on cpu", sent_logs)
    assert "resident rows" not in sent_logs
    rates = [
        float(r)
        for r in re.findall(
            r"resident rows after epoch \d+: \d+ on cpu, hit rate ([\d.]+)", held_logs
        )
    ]
    assert rates and all(0.5 < r <= 1.0 for r in rates), held_logs[-3000:]
    for key in ("loss", "train_acc", "val_acc", "test_acc"):
        assert held[key] == sent[key], (key, held, sent)
