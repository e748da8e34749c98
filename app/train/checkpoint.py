"""Training checkpoints: `<job_dir>/checkpoints/last.pt`, written atomically, read weights-only.

One format at every node count. Contents (plain dicts, lists, numbers and tensors only, so
`torch.load(weights_only=True)` accepts them): `model` (the unwrapped module's state dict),
`optimizer` (`{"dense": Adam state, "sparse": embedding optimizer state or None}`),
`embeddings` (`{node type: [num_nodes, dim]}` whole tables, gathered from their owners when
distributed), `loader_epochs` (epochs each split's loader started), `epoch` (the last
finished epoch), `metrics` (that epoch's metrics) and `rng` (one entry per rank: torch, numpy
and python states; each rank restores its own, so a resumed job draws what it would have).
A mid-epoch checkpoint (`train.checkpoint_every_steps`) adds `position`: the epoch it was
written in, the steps done in it, and each rank's running sums of that epoch (`Position`);
`loader_epochs` then counts that epoch as not yet started, so a resume re-enters it.
Its xxh3 is written beside it (`last.pt.xxh3`, `app.partition.reader.save_checked`) and
verified before every read: resume is the self-healing path, so a corrupt checkpoint stops
the job with one line instead of training on from damaged weights.
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from app.partition.reader import checksum_file, checksum_problem, save_checked

CHECKPOINT_NAME = "last.pt"


class CheckpointError(ValueError):
    """A checkpoint that does not match its checksum: resuming from it is refused."""


@dataclass(frozen=True)
class Position:
    """Where inside an epoch a mid-epoch checkpoint was written."""

    epoch: int  # the epoch being trained (the checkpoint's `epoch` is the one before)
    step: int  # batches every rank had trained in it
    stats: list[dict[str, float]]  # per rank: `EpochStats` sums over those batches

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Position | None:
        pos = state.get("position")
        return None if pos is None else cls(int(pos["epoch"]), int(pos["step"]), pos["stats"])


def checkpoint_path(job_dir: str | os.PathLike) -> Path:
    return Path(job_dir) / "checkpoints" / CHECKPOINT_NAME


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


def gather_per_rank(obj: Any) -> list[Any] | None:
    """Every rank's `obj` on rank 0 (None elsewhere); a collective under a process group."""
    if not (dist.is_available() and dist.is_initialized()):
        return [obj]
    out: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def gather_rng_states() -> list[dict[str, Any]] | None:
    """Every rank's RNG states on rank 0 (None elsewhere); a collective under a process group."""
    return gather_per_rank(rng_state())


def save_checkpoint(
    path: str | os.PathLike,
    state: dict[str, Any],
    epoch: int,
    metrics: dict[str, float] | None = None,
    rng: list[dict[str, Any]] | None = None,
    position: Position | None = None,
) -> Path:
    """Write a task's `state` (+ epoch, metrics, per-rank RNG, mid-epoch position) atomically:
    a crash keeps the previous one. `rng` defaults to this process's states (one rank)."""
    path = Path(path)
    rng = rng if rng is not None else [rng_state()]
    full = {**state, "epoch": int(epoch), "metrics": dict(metrics or {}), "rng": rng}
    if position is not None:
        full["position"] = asdict(position)
    save_checked(full, path)
    return path


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The checkpoint dict at `path`, tensors on the CPU (whatever device wrote it), after its
    bytes matched the checksum written with it (`CheckpointError` naming the file if not)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}: train once with train.checkpoint=true")
    problem = checksum_problem(path)
    if problem:
        raise CheckpointError(
            f"{path}: {problem}; refusing to resume from it: restore an intact copy, or remove "
            f"it and {checksum_file(path).name} to train from epoch 0"
        )
    return torch.load(path, map_location="cpu", weights_only=True)


def load_checkpoint(path: str | os.PathLike, task: Any) -> dict[str, Any]:
    """Restore a task (model, optimizers, embedding rows) and the RNGs; returns the dict.

    `task.load_state_dict` moves tensors to the task's device, so a checkpoint written on
    cuda loads on cpu and vice versa.
    """
    state = read_checkpoint(path)
    task.load_state_dict(state)
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    rngs = state["rng"]
    set_rng_state(rngs[rank] if rank < len(rngs) else rngs[0])  # other world size: rank 0's
    return state
