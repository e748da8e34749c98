"""DDP as the job configures it: its gradient bucket size and a compression hook, DDP's own.

The gradient all-reduce's bytes are DDP's: `train.ddp_bucket_cap_mb` sizes its buckets (a
bucket's all-reduce starts once its gradients are ready, so smaller buckets start sooner) and
`train.ddp_comm_hook` registers one of PyTorch's `default_hooks`, which halve the bytes by
casting each bucket to fp16 / bf16 for the all-reduce and back (the optimizer still steps in
float32). Nothing is reimplemented here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

log = logging.getLogger("distgnn")


def comm_hook(name: str, device: torch.device) -> Callable[..., Any] | None:
    """PyTorch's compression hook for `train.ddp_comm_hook`, or None; bf16 is NCCL's only
    (gloo on CPU trainers refuses it deep in the first backward), so it is refused here."""
    if name == "bf16" and device.type != "cuda":
        raise ValueError(
            f"train.ddp_comm_hook=bf16 on {device.type} trainers: PyTorch's bf16 hook needs "
            "NCCL (CUDA trainers); use train.ddp_comm_hook=fp16 on CPU"
        )
    hooks = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}
    return hooks.get(name)


def wrap_ddp(
    model: nn.Module,
    device: torch.device,
    find_unused: bool,
    hook: str = "none",
    bucket_cap_mb: float = 25.0,
) -> DistributedDataParallel:
    """`model` under DDP on `device`, with the configured bucket size and hook."""
    fn = comm_hook(hook, device)
    ids = [device.index] if device.type == "cuda" else None
    ddp = DistributedDataParallel(
        model, device_ids=ids, find_unused_parameters=find_unused, bucket_cap_mb=bucket_cap_mb
    )
    if fn is not None:
        ddp.register_comm_hook(None, fn)
    log.info("DDP: gradient buckets of %g MB, comm hook %s", bucket_cap_mb, hook)
    return ddp
