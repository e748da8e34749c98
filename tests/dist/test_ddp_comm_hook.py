"""DDP's own gradient compression in a real 2-node job: `train.ddp_comm_hook=fp16` with small
buckets trains (the hook all-reduces every bucket in fp16; the model still learns)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.dist, pytest.mark.long]


def test_fp16_hook_and_small_buckets_train(tmp_path, compose):
    from app.launch import run_job

    cfg = compose(
        "+experiment=smoke", "cluster.num_nodes=2", "dataset.num_nodes=3000",
        "train.epochs=4", "train.lr=0.01", "loader.batch_size=128", "mlflow.enabled=false",
        "train.ddp_comm_hook=fp16", "train.ddp_bucket_cap_mb=0.05",
        f"output_dir={tmp_path}", f"dataset.root={tmp_path}/data",
    )  # fmt: skip
    result = run_job(cfg, tmp_path / "job")
    for rank in ("trainer0-0", "trainer1-0"):
        log = (tmp_path / "job" / "logs" / f"{rank}.log").read_text()
        assert "DDP: gradient buckets of 0.05 MB, comm hook fp16" in log, log[-2000:]
    assert result["test_acc"] > 0.5, result  # learns, far above chance
