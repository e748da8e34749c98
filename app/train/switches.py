"""Lightning's training switches, under Lightning's names: the learning-rate scheduler, early
stopping on the monitor, the best-k checkpoints, gradient clipping and bf16 autocast.

`Switches` holds the per-job state of the first three; `app.train.loop.fit` calls it once per
epoch (`after_epoch`) and stores `state_dict()` in the checkpoint, so a resumed job continues
the schedule, the patience count and the best-k list where the interrupted one left them. Every
rank computes the same decisions from the same (all-reduced) metrics, so a distributed job
stops at the same epoch everywhere. Clipping and autocast act inside a training step
(`clip_gradients`, `autocast`); evaluation stays in float32 (layer-wise inference's kernels are
float32 only).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from app.config import ConfigError
from app.partition.reader import checksum_file
from app.tracking.summary import lower_is_better, monitor_for

log = logging.getLogger("distgnn.train")


@dataclass
class SwitchOptions:
    """The switches' settings (from `TrainConfig`, see `app.config`)."""

    monitor: str = "val_acc"
    scheduler: str = "none"
    epochs: int = 1
    step_size: int = 10
    gamma: float = 0.1
    plateau_patience: int = 2
    patience: int = 0  # early stopping (0: off)
    min_delta: float = 0.0
    save_top_k: int = 0

    @classmethod
    def from_config(cls, t: Any) -> SwitchOptions:
        """From `TrainConfig` `t` (its monitor: `train.monitor`, or the objective's default)."""
        return cls(
            monitor_for(t.monitor, t.objective), t.scheduler, t.epochs, t.scheduler_step_size, t.scheduler_gamma,
            t.scheduler_patience, t.early_stopping.patience, t.early_stopping.min_delta,
            t.save_top_k,
        )  # fmt: skip


def make_scheduler(opts: SwitchOptions, optimizer: torch.optim.Optimizer) -> Any:
    """The torch scheduler `opts.scheduler` names over the dense optimizer, or None."""
    sched = torch.optim.lr_scheduler
    if opts.scheduler == "cosine":
        return sched.CosineAnnealingLR(optimizer, T_max=max(1, opts.epochs))
    if opts.scheduler == "step":
        return sched.StepLR(optimizer, step_size=opts.step_size, gamma=opts.gamma)
    if opts.scheduler == "plateau":
        mode = "min" if lower_is_better(opts.monitor) else "max"
        return sched.ReduceLROnPlateau(
            optimizer, mode=mode, factor=opts.gamma, patience=opts.plateau_patience
        )
    return None


@dataclass
class Best:
    """One kept best checkpoint."""

    value: float
    epoch: int
    path: str  # file name in the checkpoints dir


@dataclass
class Switches:
    """Scheduler, early stopping and best-k state of one job (see the module docstring)."""

    opts: SwitchOptions
    scheduler: Any = None
    best: float | None = None  # early stopping: the best monitor value so far
    wait: int = 0  # evaluations since it improved
    stopped: bool = False
    kept: list[Best] = field(default_factory=list)  # best first is not guaranteed
    _pending: tuple[str, list[str]] | None = None  # (file to write, files to delete)

    @classmethod
    def build(cls, opts: SwitchOptions, optimizer: torch.optim.Optimizer) -> Switches:
        return cls(opts, make_scheduler(opts, optimizer))

    def _value(self, metrics: dict[str, float]) -> float | None:
        """The monitor's value this epoch (None: not evaluated); a monitor the job never logs
        is an error only where a switch needs it (a sweep table may still rank by it)."""
        value = metrics.get(self.opts.monitor)
        o = self.opts
        needed = o.scheduler == "plateau" or o.patience > 0 or o.save_top_k != 0
        if value is None and needed and any(k.startswith("val_") for k in metrics):
            raise ConfigError(
                f"train.monitor={self.opts.monitor}: not among this job's metrics "
                f"({', '.join(sorted(metrics))})"
            )
        return None if value is None else float(value)

    def _better(self, value: float, than: float | None, delta: float = 0.0) -> bool:
        if than is None or math.isnan(than):
            return not math.isnan(value)
        if lower_is_better(self.opts.monitor):
            return value < than - delta
        return value > than + delta

    def after_epoch(self, epoch: int, metrics: dict[str, float]) -> dict[str, float]:
        """Step the scheduler, count patience and rank this epoch among the best k (its file
        is written by `write_best`, once the epoch's checkpoint is). Returns what to log: the
        learning rate the next epoch uses (`lr`)."""
        value = self._value(metrics)
        if self.scheduler is not None:
            if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                if value is not None:
                    self.scheduler.step(value)
            else:
                self.scheduler.step()
        self._pending = None
        if value is None:
            return self._lr()
        if self.opts.save_top_k:
            self._rank_checkpoint(epoch, value)
        if self.opts.patience:
            if self._better(value, self.best, self.opts.min_delta):
                self.best, self.wait = value, 0
            else:
                self.wait += 1
                if self.wait >= self.opts.patience:
                    self.stopped = True
                    log.info(
                        "early stopping: %s has not improved on %.4g for %d evaluations",
                        self.opts.monitor, self.best, self.wait,
                    )  # fmt: skip
        return self._lr()

    def _lr(self) -> dict[str, float]:
        if self.scheduler is None:
            return {}
        return {"lr": float(self.scheduler.optimizer.param_groups[0]["lr"])}

    def _rank_checkpoint(self, epoch: int, value: float) -> None:
        """Keep this epoch when it ranks among the best k; note what it displaces."""
        k, worst = self.opts.save_top_k, self._worst()
        if k > 0 and len(self.kept) >= k and worst is not None:
            if not self._better(value, worst.value):
                return
        name = f"epoch_{epoch}-{self.opts.monitor}_{value:.4f}.pt"  # no "=": Hydra-safe
        self.kept.append(Best(value, epoch, name))
        dropped = []
        while k > 0 and len(self.kept) > k:
            drop = self._worst()
            assert drop is not None
            self.kept.remove(drop)
            dropped.append(drop.path)
        self._pending = (name, dropped)

    def write_best(self, last: Path) -> None:
        """Copy `last` (this epoch's checkpoint, just written) to its best-k name and delete
        the ones it displaced (rank 0)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        name, dropped = pending
        for src, dst in ((checksum_file(last), checksum_file(last.parent / name)),
                         (last, last.parent / name)):  # fmt: skip
            tmp = dst.parent / f".{dst.name}.tmp"  # the checksum first: a crash between the two
            shutil.copyfile(src, tmp)  # leaves a file whose sidecar names its bytes or none
            os.replace(tmp, dst)
        for old in dropped:
            (last.parent / old).unlink(missing_ok=True)
            checksum_file(last.parent / old).unlink(missing_ok=True)

    def _worst(self) -> Best | None:
        if not self.kept:
            return None
        sign = 1.0 if lower_is_better(self.opts.monitor) else -1.0
        return max(self.kept, key=lambda b: (sign * b.value, b.epoch))

    def state_dict(self) -> dict[str, Any]:
        """Plain values only (the checkpoint is read with weights_only=True)."""
        return {
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "best": self.best,
            "wait": self.wait,
            "stopped": self.stopped,
            "kept": [[b.value, b.epoch, b.path] for b in self.kept],
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore from a checkpoint (None: one written before the switches existed)."""
        if not state:
            return
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.best, self.wait = state["best"], int(state["wait"])
        self.stopped = bool(state["stopped"])
        self.kept = [Best(float(v), int(e), str(p)) for v, e, p in state["kept"]]


def clip_gradients(model: nn.Module, max_norm: float) -> None:
    """Lightning's `gradient_clip_val` (algorithm "norm"): scale all gradients so their global
    L2 norm is at most `max_norm` (0: off). Sparse embedding gradients are not clipped."""
    if max_norm > 0:
        params = [p for p in model.parameters() if p.grad is not None and not p.grad.is_sparse]
        torch.nn.utils.clip_grad_norm_(params, max_norm)


def autocast(precision: str, device_type: str) -> contextlib.AbstractContextManager:
    """bf16 autocast for `precision="bf16-mixed"` (CPU and CUDA alike), else nothing."""
    if precision == "bf16-mixed":
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
