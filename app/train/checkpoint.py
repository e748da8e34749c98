"""Training checkpoints: `<job_dir>/checkpoints/last.pt`, written atomically, read weights-only.

Contents (plain dicts, lists, numbers and tensors only, so `torch.load(weights_only=True)`
accepts them): `model` (the unwrapped module's state dict), `optimizer`, `epoch` (the last
finished epoch), `metrics` (that epoch's metrics) and `rng` (torch, numpy and python states).
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from app.fsutil import torch_save_atomic

CHECKPOINT_NAME = "last.pt"


def checkpoint_path(job_dir: str | os.PathLike) -> Path:
    return Path(job_dir) / "checkpoints" / CHECKPOINT_NAME


def unwrap(model: nn.Module) -> nn.Module:
    """The bare model inside a DDP (or any `.module`-holding) wrapper."""
    return getattr(model, "module", model)


def rng_state() -> dict[str, Any]:
    """torch / numpy / python RNG states as tensors and numbers (weights-only loadable)."""
    _, keys, pos, has_gauss, cached = np.random.get_state()
    version, mt, gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "python": {
            "version": version,
            "state": torch.tensor(mt, dtype=torch.int64),
            "gauss": gauss,
        },
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    npy = state["numpy"]
    keys = npy["keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, npy["pos"], npy["has_gauss"], npy["cached"]))
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"].tolist()), py["gauss"]))


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    epoch: int,
    metrics: dict[str, float] | None = None,
) -> Path:
    """Write the checkpoint atomically (a crash mid-write keeps the previous one)."""
    path = Path(path)
    state = {
        "model": unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": int(epoch),
        "metrics": dict(metrics or {}),
        "rng": rng_state(),
    }
    torch_save_atomic(state, path)
    return path


def load_checkpoint(
    path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> dict[str, Any]:
    """Restore model (and optimizer, RNG) from `path`; returns the whole checkpoint dict."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}: train once with train.checkpoint=true")
    state = torch.load(path, map_location="cpu", weights_only=True)
    unwrap(model).load_state_dict(state["model"])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    set_rng_state(state["rng"])
    return state
