"""`train.device`: cpu | cuda | auto; refused early without CUDA; CUDA paths where there is one."""

from __future__ import annotations

import pytest
import torch

from app.config import ConfigError
from app.placement import ddp_backend, resolve_device, trainer_device, trainers_per_gpu
from app.task.device import DeviceLoader
from app.task.local import LocalSource
from app.task.node import NodeTask
from app.train.checkpoint import checkpoint_path, load_checkpoint, read_checkpoint
from app.train.loop import FitOptions, fit
from tests.helpers.jobs import run_app
from tests.helpers.toy import toy_config, toy_graph

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device on this machine")
gpu = pytest.mark.gpu  # `make test-gpu`
needs_no_cuda = pytest.mark.skipif(CUDA, reason="CUDA is available: nothing to refuse")


def test_auto_picks_cuda_only_when_available():
    assert resolve_device("auto").type == ("cuda" if CUDA else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_unknown_device_is_rejected(compose):
    with pytest.raises(ConfigError, match="train.device='tpu'"):
        compose("+experiment=smoke", "train.device=tpu")


@pytest.mark.dist
@needs_no_cuda
def test_cuda_without_cuda_fails_in_one_line_before_any_process(tmp_path):
    proc = run_app(
        "+experiment=smoke", "cluster.num_nodes=2", "train.device=cuda",
        f"output_dir={tmp_path}", f"hydra.run.dir={tmp_path}/run", timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "train.device='cuda'" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "logs").exists() and not (tmp_path / "partitions").exists()


def test_cpu_device_loader_passes_batches_through():
    batches = [torch.zeros(2), torch.ones(2)]
    assert list(DeviceLoader(batches, torch.device("cpu"))) == batches


def test_cpu_trainers_reduce_over_gloo(compose):
    cfg = compose("+experiment=smoke", "cluster.num_nodes=2")
    assert trainer_device(cfg, 1) == torch.device("cpu") and ddp_backend(cfg) == "gloo"
    assert trainers_per_gpu(cfg) == 1


@gpu
@needs_cuda
def test_more_trainers_than_gpus_share_them_round_robin(compose):
    gpus = torch.cuda.device_count()
    cfg = compose("+experiment=smoke", "train.device=cuda", f"cluster.procs_per_node={gpus + 1}")
    assert trainer_device(cfg, gpus) == torch.device("cuda", 0)
    assert ddp_backend(cfg) == "gloo"  # NCCL refuses two ranks on one GPU
    assert trainers_per_gpu(cfg) == 2  # the default feature budget is split between them
    own = compose("+experiment=smoke", "train.device=cuda")
    assert trainer_device(own, 0) == torch.device("cuda", 0)
    assert ddp_backend(own) == "cpu:gloo,cuda:nccl"


@gpu
@needs_cuda
def test_cuda_trainer_learns_and_its_checkpoint_loads_on_cpu(tmp_path):
    data = toy_graph(num_nodes=400, seed=0)
    cfg = toy_config()
    cfg.train.device = "cuda"
    task = NodeTask(cfg, LocalSource(cfg, data))
    batch = next(iter(task.loaders["train"]))
    assert batch.x.is_cuda and batch.edge_index.is_cuda
    m = fit(task, FitOptions(epochs=8, job_dir=str(tmp_path)))
    assert m["val_acc"] > 0.8, m
    saved = read_checkpoint(checkpoint_path(tmp_path))["model"]  # map_location: cpu
    assert not any(v.is_cuda for v in saved.values())
    cpu = NodeTask(toy_config(seed=5), LocalSource(toy_config(seed=5), data))
    load_checkpoint(checkpoint_path(tmp_path), cpu)
    for a, b in zip(cpu.bare.state_dict().values(), task.bare.state_dict().values(), strict=True):
        assert torch.equal(a, b.cpu())
