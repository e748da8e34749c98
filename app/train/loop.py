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
import os
import sys
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel

from app.loader.protocol import TrainLoader
from app.task.metrics import EpochStats, all_reduce, dist_ready
from app.task.step import Objective
from app.train.checkpoint import (
    Position,
    checkpoint_path,
    gather_per_rank,
    gather_rng_states,
    load_checkpoint,
    read_checkpoint,
    rng_state,
    save_checkpoint,
)
from app.train.finite import check_loss
from app.train.switches import Switches, SwitchOptions, autocast, clip_gradients
from app.train.wire import WireMeter

log = logging.getLogger("distgnn.train")


def _join_context(model: nn.Module) -> contextlib.AbstractContextManager:
    if dist_ready() and isinstance(model, DistributedDataParallel):
        return Join([model])
    return contextlib.nullcontext()


def _rank() -> int:
    return torch.distributed.get_rank() if dist_ready() else 0


def _progress(
    loader: Iterable, desc: str, total: int | None
) -> tuple[Iterable, Callable[[EpochStats, float], None]]:
    """Rank 0's epoch bar over `loader` (steps, ETA, seeds/s, data wait) and the function that
    updates its rates after a step; other ranks get the loader itself and a no-op."""
    if _rank() != 0:
        return loader, lambda stats, start: None
    from tqdm import tqdm

    from app.tracking.progress_lines import PROGRESS_ENV, bar_options

    pumped = os.environ.get(PROGRESS_ENV) == "1"  # a job's child: the launcher draws the bar
    bar = tqdm(loader, desc=desc, total=total, leave=False, **bar_options(sys.stderr, pumped))

    def rates(stats: EpochStats, start: float) -> None:
        wall = max(time.perf_counter() - start, 1e-9)
        bar.set_postfix_str(
            f"{_running_loss(stats)}{stats.seeds / wall:,.0f} seeds/s, "
            f"data wait {100 * stats.data_wait_s / wall:.0f}%",
            refresh=False,
        )

    return bar, rates


def _running_loss(stats: EpochStats) -> str:
    """`loss 2.412, ` (the epoch's mean so far) where the sum is on the host; "" on a GPU,
    where reading it back every step would stall the device."""
    total = stats.loss_sum
    if isinstance(total, torch.Tensor) and total.device.type != "cpu":
        return ""
    return f"loss {float(total) / max(stats.seeds, 1):.3f}, "


def _length(loader: TrainLoader, max_steps: int) -> int:
    n = len(loader)
    return min(n, max_steps) if max_steps else n


def _each(batches: Iterable[Any]) -> Generator[Any, None, None]:
    """`batches` as a generator: closing it closes the bar's / loader's own iterator."""
    yield from batches


class _Optimizer(Protocol):
    def zero_grad(self, set_to_none: bool = True) -> None: ...

    def step(self) -> None: ...


def train_epoch(
    model: nn.Module,
    loader: TrainLoader,
    optimizer: _Optimizer,
    objective: Objective,
    *,
    max_steps: int = 0,
    desc: str = "train",
    done: EpochStats | None = None,
    on_step: Callable[[EpochStats], None] | None = None,
    clip_val: float = 0.0,
    precision: str = "32-true",
) -> EpochStats:
    """One pass over `loader` (at most `max_steps` batches if > 0); returns job-wide sums.

    Times the wait for each batch (data) separately from forward/backward/step (compute).
    A NaN or inf loss raises `NonFiniteLossError` naming `desc`, the step (0-based, within
    the epoch) and the first non-finite input or parameter, before it reaches the weights; a
    loss on a GPU is checked once, at the epoch's end (a per-step check would stall the GPU).
    Under DDP the epoch runs inside `Join`, so ranks with fewer batches do not hang.

    Args:
        done: this rank's sums over the batches already trained this epoch (a mid-epoch
            resume): that many batches are drawn and dropped first (their sampling is seeded
            by their index, so the rest are the batches the interrupted run would have had).
        on_step: called with this rank's running sums after every step (mid-epoch checkpoints).
        clip_val: `train.gradient_clip_val`; precision: `train.precision` (app.train.switches).
    """
    model.train()
    stats = EpochStats(**done.to_dict()) if done is not None else EpochStats()
    start = time.perf_counter()
    device_type = next(model.parameters()).device.type
    with _join_context(model):
        bar, rates = _progress(loader, desc, _length(loader, max_steps))
        batches = _each(bar)
        for _ in range(int(stats.steps)):
            next(batches, None)
        while not max_steps or stats.steps < max_steps:
            t0 = time.perf_counter()
            batch = next(batches, None)
            t1 = time.perf_counter()
            if batch is None:
                break
            optimizer.zero_grad(set_to_none=True)
            with autocast(precision, device_type):
                res = objective(model, batch)
            loss = res.loss.detach()
            if loss.device.type == "cpu":  # free on the host; on a GPU a read-back per step
                check_loss(float(loss), model, batch, f"{desc}, step {int(stats.steps)}")
            res.loss.backward()
            clip_gradients(model, clip_val)
            optimizer.step()
            stats.add(loss, res.correct, res.count, res.edges)  # summed on the device
            stats.data_wait_s += t1 - t0
            stats.compute_s += time.perf_counter() - t1
            rates(stats, start)
            if on_step is not None:
                on_step(stats)
        batches.close()  # stopped at max_steps: end the progress bar and the loader's epoch
    stats.settle()  # a GPU epoch's losses, checked once: the step is not known there
    check_loss(float(stats.loss_sum), model, None, f"{desc} (a step's loss on the device)")
    stats.wall_s = time.perf_counter() - start
    return stats.reduced()


class _Tracker(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...


class _Task(Protocol):
    model: nn.Module
    optimizer: Any

    @property
    def loaders(self) -> Mapping[str, TrainLoader]: ...

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
    resume: bool | str = False  # True | False | "auto" (no warning without a checkpoint)
    checkpoint_every_steps: int = 0  # also checkpoint inside an epoch every N steps (0: off)
    switches: SwitchOptions = field(default_factory=SwitchOptions)
    clip_val: float = 0.0  # train.gradient_clip_val
    precision: str = "32-true"  # train.precision
    eval_ckpt: str | None = None  # task=eval: score this checkpoint, train nothing

    @classmethod
    def from_config(cls, t: Any, job_dir: str | None, eval_ckpt: str | None = None) -> FitOptions:
        """From `TrainConfig` `t`, checkpointing under `job_dir` (`eval_ckpt`: task=eval)."""
        return cls(
            t.epochs,
            t.eval_every,
            t.max_steps_per_epoch,
            job_dir,
            t.checkpoint,
            t.resume,
            t.checkpoint_every_steps,
            SwitchOptions.from_config(t),
            t.gradient_clip_val,
            t.precision,
            eval_ckpt,
        )


def eval_checkpoint(cfg: Any) -> str | None:
    """The checkpoint a `task=eval` job scores (`ckpt_path`), or None for a training job."""
    return cfg.ckpt_path if cfg.task == "eval" else None


def epochs_done(cfg: Any, metrics: dict[str, float]) -> int:
    """Epochs the job's model has trained: all of them, fewer after early stopping."""
    return int(metrics.get("epoch", cfg.train.epochs - 1)) + 1


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
    step = epoch; in a job across machines, each host's bytes on the wire per batch and per
    evaluation (`app.train.wire`). After every epoch the checkpoint is written (rank 0; every rank takes part
    in gathering distributed embedding rows) BEFORE the metrics are logged; with `opts.resume`
    every rank restores it and continues after the saved epoch.

    With `opts.checkpoint_every_steps` > 0 the checkpoint is also written inside an epoch,
    every N steps, with the position (`app.train.checkpoint.Position`): a resume continues
    from that step with the same batches, weights, optimizer and RNG states.

    The switches (`app.train.switches`: scheduler, early stopping, best-k) act after each
    epoch's evaluation; their state is in every checkpoint. `opts.eval_ckpt` (task=eval) only
    scores that checkpoint.
    """
    if opts.eval_ckpt:
        return _score_checkpoint(task, opts.eval_ckpt, tracker, on_epoch)
    switches = Switches.build(opts.switches, task.optimizer.dense)

    def state_of() -> dict[str, Any]:
        return {**task.state_dict(), "switches": switches.state_dict()}

    first, position = _resume(task, opts, switches)
    if opts.job_dir and first > 0 and (switches.stopped or first >= opts.epochs):
        why = "early stopping had ended" if switches.stopped else "the checkpoint ends"
        log.info("%s this job at epoch %d: nothing to train", why, first - 1)
        return dict(read_checkpoint(checkpoint_path(opts.job_dir))["metrics"])
    metrics: dict[str, float] = {}
    wire = WireMeter.for_job()
    for epoch in range(first, opts.epochs):
        _data_path(task.loaders["train"], 0)  # restart the counters: this epoch's traffic only
        start = wire.read() if wire else None
        done = None
        if position is not None and position.epoch == epoch:
            done = EpochStats(**position.stats[min(_rank(), len(position.stats) - 1)])
        stats = train_epoch(
            task.model,
            task.loaders["train"],
            task.optimizer,
            task.step,
            max_steps=opts.max_steps,
            desc=f"epoch {epoch}",
            done=done,
            on_step=_mid_epoch_saver(task, opts, epoch, state_of),
            clip_val=opts.clip_val,
            precision=opts.precision,
        )
        metrics = {"epoch": float(epoch), **stats.as_metrics()}
        metrics.update(_data_path(task.loaders["train"], stats.steps))
        trained = wire.read() if wire else None
        if wire:
            metrics.update(wire.metrics("batch", start, trained, stats.steps / wire.num_nodes))
        if (epoch + 1) % opts.eval_every == 0 or epoch == opts.epochs - 1:
            metrics.update(task.evaluate(("val", "test")))
            if wire:
                metrics.update(wire.metrics("eval", trained, wire.read(), 1.0))
        metrics.update(switches.after_epoch(epoch, metrics))
        if opts.checkpoint and opts.job_dir:
            state = state_of()  # collective for distributed tables
            rngs = gather_rng_states()
            if _rank() == 0:
                last = save_checkpoint(checkpoint_path(opts.job_dir), state, epoch, metrics, rngs)
                switches.write_best(last)
        _report(epoch, metrics, tracker, on_epoch)
        if switches.stopped:
            break
    return metrics


def _score_checkpoint(
    task: _Task,
    path: str,
    tracker: _Tracker | None,
    on_epoch: Callable[[int, dict[str, float]], None] | None,
) -> dict[str, float]:
    """task=eval: the checkpoint's weights (and embedding rows) scored on val and test."""
    from app.config import ConfigError

    try:
        state = load_checkpoint(path, task)
    except RuntimeError as err:  # another model's state dict: name its first difference
        lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
        first = lines[1] if len(lines) > 1 else (lines or [""])[0]
        raise ConfigError(
            f"ckpt_path={path}: does not fit this job's model ({first[:200]}); give the "
            "experiment and overrides it was trained with"
        ) from None
    epoch = int(state["epoch"])
    log.info("scoring %s (epoch %d) on val and test", path, epoch)
    metrics = {"epoch": float(epoch), **task.evaluate(("val", "test"))}
    _report(epoch, metrics, tracker, on_epoch)
    return metrics


def _data_path(loader: TrainLoader, steps: int) -> dict[str, float]:
    """The epoch's remote traffic over every trainer: bytes per batch, the share of remote rows
    the caches served (`cache_hit_rate`: halo and hot; `hot_cache_hit_rate`: the hot cache's).

    Distributed loaders count what their samplers fetched by RPC since the last call; local
    loaders fetch nothing remote (empty stats) and log nothing. Collective when the stats are
    not empty: every rank of a job has the same kind of loader, so every rank calls it.
    """
    d = loader.data_stats()
    if not (d and steps):
        return {}
    keys = ("feature_rows", "cache_hits", "hot_cache_hits", "feature_bytes", "hop_bytes")
    rows, hits, hot, feature_bytes, hop_bytes = all_reduce([d.get(k, 0.0) for k in keys])
    return {
        "remote_feature_bytes_per_batch": feature_bytes / steps,
        "hop_bytes_per_batch": hop_bytes / steps,
        "cache_hit_rate": hits / (rows + hits) if rows + hits else 0.0,
        "hot_cache_hit_rate": hot / (rows + hits) if rows + hits else 0.0,
    }


def _mid_epoch_saver(
    task: _Task, opts: FitOptions, epoch: int, state_of: Callable[[], dict[str, Any]]
) -> Callable[[EpochStats], None] | None:
    """The `on_step` hook writing a checkpoint every `checkpoint_every_steps` steps, or None.

    Writing is a collective (embedding rows, every rank's RNG and sums), so it happens only at
    steps every rank reaches: below the smallest number of batches of any rank (uneven DDP
    inputs), and never at an epoch's last step (the epoch's own checkpoint follows).
    """
    every = opts.checkpoint_every_steps
    if not (opts.checkpoint and opts.job_dir and every > 0):
        return None
    loader = task.loaders["train"]
    (neg_min,) = all_reduce([-float(_length(loader, opts.max_steps))], op="max")
    common = int(-neg_min)

    def save(stats: EpochStats) -> None:
        step = int(stats.steps)
        if step % every or step >= common:
            return
        state = state_of()  # collective for distributed tables
        state["loader_epochs"]["train"] = loader.epoch - 1  # re-enter this epoch on resume
        ranks = gather_per_rank({"rng": rng_state(), "stats": stats.to_dict()})
        if _rank() == 0:
            where = Position(epoch, step, [r["stats"] for r in ranks])
            rngs = [r["rng"] for r in ranks]
            save_checkpoint(checkpoint_path(opts.job_dir), state, epoch - 1, {}, rngs, where)

    return save


def _resume(task: _Task, opts: FitOptions, switches: Switches) -> tuple[int, Position | None]:
    """(first epoch to run, position inside it or None): (0, None) without a checkpoint;
    one past the checkpointed epoch, or the epoch a mid-epoch checkpoint was written in. The
    switches continue from their saved state."""
    if not (opts.resume and opts.job_dir):
        return 0, None
    path = checkpoint_path(opts.job_dir)
    if not path.is_file():
        say = log.info if opts.resume == "auto" else log.warning
        say("train.resume=%s but %s does not exist: starting from epoch 0", opts.resume, path)
        return 0, None
    state = load_checkpoint(path, task)
    switches.load_state_dict(state.get("switches"))
    position = Position.from_state(state)
    if position is not None:
        log.info("resumed from %s (epoch %d, step %d)", path, position.epoch, position.step)
        return position.epoch, position
    log.info("resumed from %s (epoch %d done)", path, state["epoch"])
    return int(state["epoch"]) + 1, None


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
