"""`bench.gpu` without a GPU: its one-line refusal, its job configs, and how it reads a job."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace

import pytest
import torch

from app.config import compose_config
from bench import gpu

LOG = """\
[2026-11-27 10:00:05,000][distgnn.train][INFO] - epoch 0: loss=1.2, epoch_time_s=2, \
data_wait_frac=0.3, sampled_edges_per_s=1e+07, eval_time_s=3, test_acc=0.8, steps=240
\r[2026-11-27 10:00:10,000][distgnn.train][INFO] - epoch 1: loss=0.9, epoch_time_s=1.5, \
data_wait_frac=0.1, sampled_edges_per_s=2e+07, eval_time_s=0.5, test_acc=0.85, steps=240
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_says_so_in_one_line(capsys):
    gpu.main([])
    assert capsys.readouterr().out == gpu.NEEDS_CUDA + "\n"


@pytest.mark.parametrize("name", sorted(gpu.WORKLOADS))
def test_each_workload_composes_into_a_valid_job(name):
    fanout, extra = gpu.WORKLOADS[name]
    cfg = compose_config([*gpu._overrides(1000, 2), *extra, "sampler.device=cpu"])
    assert cfg.sampler.num_neighbors == fanout and cfg.model.num_layers == len(fanout)
    assert cfg.loader.batch_size == 1024 and cfg.cluster.num_nodes == 1
    assert cfg.model.hidden_channels == (256 if len(fanout) == 3 else 128)


def test_a_jobs_figures_come_from_its_last_epoch_and_the_gpu_samples_inside_it():
    at = datetime(2026, 11, 27, 10, 0, 8)  # inside epoch 1's training: [8.0, 9.5]
    samples = [(at, 60.0), (datetime(2026, 11, 27, 10, 0, 9), 80.0), (datetime(2026, 1, 1), 0.0)]
    out = gpu.job_figures(LOG, samples)
    assert out == {
        "epoch_time_s": 1.5, "data_wait_frac": 0.1, "sampled_edges_per_s": 2e7,
        "eval_time_s": 0.5, "test_acc": 0.85, "first_eval_time_s": 3.0, "gpu_busy_frac": 0.7,
    }  # fmt: skip
    with pytest.raises(ValueError, match="no epoch lines"):
        gpu.job_figures("nothing here", samples)


def test_a_held_jobs_hit_rate_is_read_and_other_epoch_lines_are_not_metrics():
    held = (
        "[2026-11-27 10:00:09,000][distgnn.train][INFO] - epoch 1: x cache: 5 of 9 rows on "
        "cuda:0, hit rate 0.5\n[trainer0-0] 10:00:09 I distgnn.train: resident rows after "
        "epoch 1: 1200 on cuda:0, hit rate 0.885\n"
    )
    out = gpu.job_figures(LOG + held, [])
    assert out["held_hit_rate"] == 0.885 and out["test_acc"] == 0.85


def test_parts_can_be_chosen_and_a_2_node_job_composes():
    assert gpu._args(["1000", "--only=dist,jobs"]) == (1000, 2, 8, ("dist", "jobs"))
    assert gpu._args([])[3] == gpu.PARTS
    with pytest.raises(SystemExit, match="--only=profiles: expected parts of"):
        gpu._args(["--only=profiles"])
    cfg = compose_config([*gpu._overrides(1000, 2), "cluster.num_nodes=2"])
    assert cfg.cluster.num_nodes == 2  # the last value of a key wins


def event(key, device, self_gpu_us, self_cpu_us, count=1):
    kind = SimpleNamespace(name=device)
    return SimpleNamespace(
        key=key, device_type=kind, self_device_time_total=self_gpu_us,
        self_cpu_time_total=self_cpu_us, count=count,
    )  # fmt: skip


def test_a_profile_is_summarised_into_busy_share_host_waits_and_top_operations():
    events = [
        event("aten::mm", "CPU", 0, 300), event("sm90_gemm", "CUDA", 400_000, 0),
        event("aten::sort", "CPU", 0, 100), event("radix_sort", "CUDA", 100_000, 0),
        event("cudaStreamSynchronize", "CPU", 0, 50, count=7),
        event("Memcpy DtoH (Device -> Pinned)", "CUDA", 1_000, 0, count=3),
    ]  # fmt: skip
    out = gpu.profile_summary(events, wall_s=1.0, top=2)
    assert out["gpu_busy_frac"] == pytest.approx(0.501)
    assert out["host_waits"] == 10
    assert out["top_gpu"] == [("sm90_gemm", 0.4), ("radix_sort", 0.1)]
    assert out["top_cpu"] == [("aten::mm", 0.0003), ("aten::sort", 0.0001)]


def test_a_real_cpu_profile_has_the_fields_the_summary_reads():
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        a = torch.randn(64, 64)
        (a @ a).sum()
    out = gpu.profile_summary(prof.key_averages(), wall_s=0.1)
    assert out["gpu_busy_frac"] == 0.0 and out["top_gpu"] == []
    assert any(key == "aten::mm" for key, _ in out["top_cpu"])
