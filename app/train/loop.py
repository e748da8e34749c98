"""The training loop over a `Task` (`app.task`): epochs, evaluation, checkpoints, resume.

The same functions run single-process and inside a DDP process group: the task's source
wrapped the model (or not) and made the loaders (local or distributed), so nothing here knows
where the graph lives.

Uneven inputs: ranks can get different numbers of batches (partitions hold different numbers
of training nodes). `train_epoch` runs the epoch under `torch.distributed.algorithms.Join`
with the DDP model as joinable: a rank that runs out of batches shadows the gradient
all-reduces of the others until every rank is done, so no rank hangs and no batch is dropped.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel

from app.task.metrics import EpochStats, all_reduce, dist_ready
from app.task.step import Objective
from app.train.checkpoint import (
    checkpoint_path,
    gather_rng_states,
    load_checkpoint,
    save_checkpoint,
)

log = logging.getLogger("distgnn.train")


def _join_context(model: nn.Module) -> contextlib.AbstractContextManager:
    if dist_ready() and isinstance(model, DistributedDataParallel):
        return Join([model])
    return contextlib.nullcontext()


def _rank() -> int:
    return torch.distributed.get_rank() if dist_ready() else 0


def _progress(loader: Iterable, desc: str, total: int | None) -> Iterable:
    if _rank() != 0:
        return loader
    from tqdm import tqdm

    tty = sys.stderr.isatty()  # in log files, one line every 30 s instead of every batch
    return tqdm(
        loader,
        desc=desc,
        total=total,
        leave=False,
        dynamic_ncols=True,
        mininterval=0.1 if tty else 30,
    )


def _length(loader: Iterable, max_steps: int) -> int | None:
    try:
        n = len(loader)  # type: ignore[arg-type]
    except TypeError:
        return max_steps or None
    return min(n, max_steps) if max_steps else n


class _Optimizer(Protocol):
    def zero_grad(self, set_to_none: bool = True) -> None: ...

    def step(self) -> None: ...


def train_epoch(
    model: nn.Module,
    loader: Iterable,
    optimizer: _Optimizer,
    objective: Objective,
    *,
    max_steps: int = 0,
    desc: str = "train",
) -> EpochStats:
    """One pass over `loader` (at most `max_steps` batches if > 0); returns job-wide sums.

    Times the wait for each batch (data) separately from forward/backward/step (compute).
    Under DDP the epoch runs inside `Join`, so ranks with fewer batches do not hang.
    """
    model.train()
    stats = EpochStats()
    start = time.perf_counter()
    with _join_context(model):
        batches = iter(_progress(loader, desc, _length(loader, max_steps)))
        while not max_steps or stats.steps < max_steps:
            t0 = time.perf_counter()
            batch = next(batches, None)
            t1 = time.perf_counter()
            if batch is None:
                break
            optimizer.zero_grad(set_to_none=True)
            res = objective(model, batch)
            res.loss.backward()
            optimizer.step()
            stats.add(float(res.loss.detach()), res.correct, res.count, res.edges)
            stats.data_wait_s += t1 - t0
            stats.compute_s += time.perf_counter() - t1
        if hasattr(batches, "close"):  # stopped at max_steps: end the progress bar / generator
            batches.close()
    stats.wall_s = time.perf_counter() - start
    return stats.reduced()


class _Tracker(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...


class _Task(Protocol):
    model: nn.Module
    optimizer: Any
    loaders: dict[str, Iterable]

    def step(self, model: nn.Module, batch: Any) -> Any: ...

    def evaluate(self, splits: tuple[str, ...]) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass
class FitOptions:
    epochs: int = 1
    eval_every: int = 1  # evaluate every N epochs (and always after the last one)
    max_steps: int = 0  # cap on training batches per epoch (0: all)
    job_dir: str | None = None  # checkpoints go to <job_dir>/checkpoints/last.pt
    checkpoint: bool = True
    resume: bool = False

    @classmethod
    def from_config(cls, t: Any, job_dir: str | None) -> FitOptions:
        """From `TrainConfig` `t`, checkpointing under `job_dir`."""
        return cls(t.epochs, t.eval_every, t.max_steps_per_epoch, job_dir, t.checkpoint, t.resume)


def fit(
    task: _Task,
    opts: FitOptions,
    *,
    tracker: _Tracker | None = None,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, float]:
    """Train `task` for `opts.epochs` epochs; returns the last epoch's metrics.

    Per epoch: `loss, train_acc, epoch_time_s, seeds_per_s, sampled_edges_per_s,
    data_wait_frac, steps` and, on evaluation epochs, `val_*` / `test_*` from
    `task.evaluate(("val", "test"))` (`acc`; `auc`, `mrr` for links), logged to `tracker` with
    step = epoch. After every epoch the checkpoint is written (rank 0; every rank takes part
    in gathering distributed embedding rows) BEFORE the metrics are logged; with `opts.resume`
    every rank restores it and continues after the saved epoch.
    """
    first = _resume(task, opts)
    metrics: dict[str, float] = {}
    for epoch in range(first, opts.epochs):
        _data_path(task.loaders["train"], 0)  # restart the counters: this epoch's traffic only
        stats = train_epoch(
            task.model,
            task.loaders["train"],
            task.optimizer,
            task.step,
            max_steps=opts.max_steps,
            desc=f"epoch {epoch}",
        )
        metrics = {"epoch": float(epoch), **stats.as_metrics()}
        metrics.update(_data_path(task.loaders["train"], stats.steps))
        if (epoch + 1) % opts.eval_every == 0 or epoch == opts.epochs - 1:
            metrics.update(task.evaluate(("val", "test")))
        if opts.checkpoint and opts.job_dir:
            state = task.state_dict()  # collective for distributed tables
            rngs = gather_rng_states()
            if _rank() == 0:
                save_checkpoint(checkpoint_path(opts.job_dir), state, epoch, metrics, rngs)
        _report(epoch, metrics, tracker, on_epoch)
    return metrics


def _data_path(loader: Any, steps: int) -> dict[str, float]:
    """The epoch's remote traffic over every trainer: bytes per batch, halo-cache hit rate.

    Distributed loaders count what their samplers fetched by RPC since the last call; local
    loaders fetch nothing remote and log nothing. Collective: every rank calls it.
    """
    counters = getattr(loader, "data_stats", None)
    if counters is None:
        return {}
    d = counters()
    if not steps:
        return {}
    rows, hits, feature_bytes, hop_bytes = all_reduce(
        [d.get(k, 0.0) for k in ("feature_rows", "cache_hits", "feature_bytes", "hop_bytes")]
    )
    return {
        "remote_feature_bytes_per_batch": feature_bytes / steps,
        "hop_bytes_per_batch": hop_bytes / steps,
        "cache_hit_rate": hits / (rows + hits) if rows + hits else 0.0,
    }


def _resume(task: _Task, opts: FitOptions) -> int:
    """First epoch to run: 0, or one past the checkpointed epoch when resuming."""
    if not (opts.resume and opts.job_dir):
        return 0
    path = checkpoint_path(opts.job_dir)
    if not path.is_file():
        log.warning("train.resume=true but %s does not exist: starting from epoch 0", path)
        return 0
    state = load_checkpoint(path, task)
    log.info("resumed from %s (epoch %d done)", path, state["epoch"])
    return int(state["epoch"]) + 1


def _report(
    epoch: int,
    metrics: dict[str, float],
    tracker: _Tracker | None,
    on_epoch: Callable[[int, dict[str, float]], None] | None,
) -> None:
    if _rank() == 0:
        shown = ", ".join(f"{k}={v:.4g}" for k, v in metrics.items() if k != "epoch")
        log.info("epoch %d: %s", epoch, shown)
        if tracker is not None:
            tracker.log_metrics(metrics, step=epoch)
    if on_epoch is not None:
        on_epoch(epoch, metrics)
