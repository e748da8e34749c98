"""Where a trainer computes, and `DeviceLoader`: batches from a CPU loader, copied to the
trainer's device one step ahead.

`trainer_device`: one GPU per local trainer (`cuda:i` for the machine's i-th trainer); a
machine with fewer GPUs than local trainers (a 1-GPU workstation running a 2-node experiment)
shares them round-robin, and DDP then uses gloo, as NCCL refuses two ranks on one GPU
(`ddp_backend`). Samplers stay on the CPU. On cuda each batch is pinned and copied with `non_blocking=True` on
a side stream while the previous step computes; the compute stream waits for the copy and the
batch's tensors are recorded on it, so the caching allocator never reuses them early. On the
CPU the loader is passed through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

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
    return trainers_per_machine(cfg) > torch.cuda.device_count()


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


class DeviceLoader:
    """Iterates `loader` with every batch on `device` (prefetching one batch on cuda)."""

    def __init__(self, loader: Iterable, device: torch.device) -> None:
        self.loader, self.device = loader, device
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)

    @property
    def epoch(self) -> int:
        """Epochs the wrapped loader has started (its shuffle and sampling seeds follow it)."""
        return int(self.loader.epoch)

    @epoch.setter
    def epoch(self, value: int) -> None:
        self.loader.epoch = int(value)

    def _copy(self, batch: Any) -> Any:
        if batch is None or self.stream is None:
            return batch
        with torch.cuda.stream(self.stream):
            return batch.pin_memory().to(self.device, non_blocking=True)

    def __iter__(self) -> Iterator[Any]:
        if self.stream is None:
            yield from self.loader
            return
        batches = iter(self.loader)
        ahead = self._copy(next(batches, None))
        while ahead is not None:
            current = ahead
            torch.cuda.current_stream(self.device).wait_stream(self.stream)
            current.record_stream(torch.cuda.current_stream(self.device))
            ahead = self._copy(next(batches, None))  # sampled + copied while `current` runs
            yield current
