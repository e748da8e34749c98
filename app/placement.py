"""Where each trainer computes: its device, how many trainers share a machine, DDP's backend.

`trainer_device`: one GPU per local trainer (`cuda:i` for the machine's i-th trainer); a
machine with fewer GPUs than local trainers (a 1-GPU workstation running a 2-node experiment)
shares them round-robin, and DDP then uses gloo, as NCCL refuses two ranks on one GPU
(`ddp_backend`). Samplers stay on the CPU. The launcher plans with the same facts (it warns
when trainers will share GPUs) as the trainers it starts, so they live below both.
"""

from __future__ import annotations

import torch

from app.config import Config


def resolve_device(name: str) -> torch.device:
    """`train.device`: cpu, cuda, or auto (cuda when available)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def trainers_per_machine(cfg: Config) -> int:
    """Trainers the launcher starts on each machine (local mode runs every node on this one)."""
    nodes_here = cfg.cluster.num_nodes if cfg.cluster.mode == "local" else 1
    return cfg.cluster.procs_per_node * nodes_here


def gpus_shared(cfg: Config) -> bool:
    """Whether this machine's trainers share GPUs (more local trainers than visible GPUs)."""
    if resolve_device(cfg.train.device).type != "cuda":
        return False
    return trainers_per_machine(cfg) > int(torch.cuda.device_count())


def trainers_per_gpu(cfg: Config) -> int:
    """How many of this machine's trainers share one GPU (1 on the CPU or with a GPU each)."""
    if resolve_device(cfg.train.device).type != "cuda":
        return 1
    return -(-trainers_per_machine(cfg) // max(1, int(torch.cuda.device_count())))


def trainer_device(cfg: Config, local_index: int) -> torch.device:
    """The device of the machine's `local_index`-th trainer: round-robin over its GPUs."""
    device = resolve_device(cfg.train.device)
    if device.type != "cuda":
        return device
    return torch.device("cuda", local_index % torch.cuda.device_count())


def ddp_backend(cfg: Config) -> str:
    """The process group's backend: NCCL for CUDA tensors when every trainer has a GPU of its
    own (gloo still reduces the CPU ones: metrics, evaluation counts), else gloo alone (CPU
    trainers, or trainers sharing GPUs)."""
    cuda = resolve_device(cfg.train.device).type == "cuda"
    return "cpu:gloo,cuda:nccl" if cuda and not gpus_shared(cfg) else "gloo"
