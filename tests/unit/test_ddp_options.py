"""DDP's own gradient options (`train.ddp_comm_hook`, `train.ddp_bucket_cap_mb`): each name maps
to PyTorch's hook, bf16 is refused where gloo cannot run it (bad values: tests/unit/test_config.py)."""

import pytest
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from app.task.ddp import comm_hook


def test_each_name_is_pytorchs_own_hook():
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert comm_hook("none", cpu) is None
    assert comm_hook("fp16", cpu) is default_hooks.fp16_compress_hook
    assert comm_hook("bf16", gpu) is default_hooks.bf16_compress_hook  # looked up, not run


def test_bf16_on_cpu_trainers_is_refused_in_one_line():
    with pytest.raises(ValueError, match="ddp_comm_hook=bf16 on cpu trainers.*use train.ddp_"):
        comm_hook("bf16", torch.device("cpu"))
