"""`bench.hosts`'s gpuspeed pieces that need no process: the fixed-step model, the emulated
rate, the job-wide bytes per batch, and `model.name` naming a builder of one's own."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from app.config import ConfigError, ModelConfig
from bench.gpu_step import STEP_ENV, build
from bench.hosts import gpuspeed_rate, job_bytes, parse_args, variant_tag


def test_the_fixed_step_sleeps_in_training_and_all_reduces_every_gradient(monkeypatch):
    monkeypatch.setenv(STEP_ENV, "0.05")
    model = build(ModelConfig(hidden_channels=16, num_layers=3), 5, 3)
    x, edges = torch.randn(40, 5), torch.randint(0, 40, (2, 120))
    start = time.perf_counter()
    out = model(x, edges, [10, 20, 10], [40, 40, 40])
    assert time.perf_counter() - start >= 0.05 and out.shape == (10, 3)  # the seed rows
    F.cross_entropy(out, torch.zeros(10, dtype=torch.long)).backward()
    assert all(p.grad is not None for p in model.parameters())  # DDP's buckets: all of them
    model.eval()
    model.step_s = 30.0  # evaluation does not sleep: this would time out the test
    assert model(x, edges).shape == (40, 3)


def test_the_fixed_step_needs_its_time(monkeypatch):
    monkeypatch.delenv(STEP_ENV, raising=False)
    with pytest.raises(ValueError, match=f"needs {STEP_ENV}"):
        build(ModelConfig(), 5, 3)


def test_the_emulated_rate_keeps_the_gpu_link_per_step():
    assert gpuspeed_rate(1.0, 5.8) == "58000kbit"  # 10 Gbit/s x 5.8 ms / 1 s
    assert gpuspeed_rate(0.5, 5.8) == "116000kbit"


def test_bytes_per_batch_are_the_jobs_over_its_epochs(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    line = "[trainer0-0] 20:00:00 I distgnn.train: epoch {}: loss=3.9, steps={}, wire_bytes_per_batch={}, remote_feature_bytes_per_batch={}, hop_bytes_per_batch=1e+03"  # noqa: E501
    (logs / "trainer0-0.log").write_text(
        "\n".join([line.format(0, 10, 6e6, 4e6), "noise", line.format(1, 10, 4e6, 2e6)])
    )
    got = job_bytes(tmp_path)  # epoch 0 sampled some of epoch 1's batches: the mean is right
    assert got == {
        "wire_bytes_per_batch": 5e6,
        "remote_feature_bytes_per_batch": 3e6,
        "hop_bytes_per_batch": 1e3,
    }


def test_depths_and_times_are_checked_in_one_line():
    with pytest.raises(SystemExit):
        parse_args(["100", "5", "2", "gpuspeed", "--depths", "0"])
    assert parse_args(["100", "5", "2,4", "gpuspeed", "--depths", "2,4"]).depths == [2, 4]


def test_records_name_the_store_dtype_and_the_cuts():
    assert variant_tag(parse_args(["100", "5", "4", "gpuspeed"])) == ""
    opts = parse_args(["100", "5", "4", "gpuspeed", "--feature-dtype", "float16",
                       "--hot-cache-bytes", "64000000", "--ddp-comm-hook", "fp16"])  # fmt: skip
    assert variant_tag(opts) == "_store16_hot64000000_gradfp16"


def test_model_name_may_name_a_builder(compose):
    assert compose("model.name=bench.gpu_step:build").model.name == "bench.gpu_step:build"
    with pytest.raises(ConfigError, match="model.name='foo': expected one of sage"):
        compose("model.name=foo")
