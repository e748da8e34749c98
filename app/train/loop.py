"""The training loop, generic over "an iterable of NeighborLoader-layout batches".

The same functions run single-process and inside a DDP process group: the caller wraps the
model in DDP (or not) and hands in a loader (local, or the distributed one). Nothing here
imports the distributed sampler.

Uneven inputs: ranks can get different numbers of batches (partitions hold different numbers
of training nodes). `train_epoch` runs the epoch under `torch.distributed.algorithms.Join`
with the DDP model as joinable: a rank that runs out of batches shadows the gradient
all-reduces of the others until every rank is done, so no rank hangs and no batch is dropped
(equalising batch counts up front would need every loader's length in advance and would throw
away the surplus batches of the larger partitions).
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
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel

from app.train.checkpoint import checkpoint_path, load_checkpoint, save_checkpoint, unwrap
from app.train.metrics import EpochStats, all_reduce, binary_auc, dist_ready

log = logging.getLogger("distgnn.train")


@dataclass
class StepResult:
    loss: Tensor  # mean loss of the batch (requires grad in training)
    correct: float  # correct predictions among `count`
    count: int  # seed nodes (or labelled edges) in the batch
    edges: int  # sampled edges in the batch
    scores: Tensor | None = None  # link objectives: scores of labelled edges (for AUC)
    labels: Tensor | None = None  # ... and their 0/1 labels
    reciprocal_ranks: Tensor | None = None  # triplet link objective: 1/rank of each positive


class Objective(Protocol):
    """What a batch means: the loss and the number of correct predictions it yields."""

    def __call__(self, model: nn.Module, batch: Any) -> StepResult: ...


def counts_of(batch: Any) -> tuple[list[int] | None, list[int] | None]:
    """Per-hop sampled node/edge counts of a batch, or (None, None) when it has none."""
    nodes = getattr(batch, "num_sampled_nodes", None)
    edges = getattr(batch, "num_sampled_edges", None)
    if nodes is None or edges is None:
        return None, None
    return [int(n) for n in nodes], [int(e) for e in edges]


def node_classification(model: nn.Module, batch: Any) -> StepResult:
    """Cross-entropy on the seed rows (`batch.batch_size` first rows) of a homogeneous batch."""
    nodes, edges = counts_of(batch)
    size = int(batch.batch_size)
    out = model(batch.x, batch.edge_index, nodes, edges)[:size]
    y = batch.y[:size].view(-1)
    loss = F.cross_entropy(out, y)
    correct = float((out.argmax(dim=-1) == y).sum())
    return StepResult(loss, correct, size, int(batch.edge_index.size(1)))


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


def train_epoch(
    model: nn.Module,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    *,
    objective: Objective = node_classification,
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


@torch.no_grad()
def eval_metrics(
    model: nn.Module,
    loader: Iterable,
    *,
    objective: Objective = node_classification,
    max_steps: int = 0,
) -> dict[str, float]:
    """`acc` over all ranks, plus `auc` / `mrr` when the objective yields scores / ranks.

    Runs the bare module (no DDP collectives per batch), so ranks may have different numbers
    of eval batches; only the final reductions are collective.
    """
    bare = unwrap(model)
    bare.eval()
    correct = total = rr_sum = rr_count = 0.0
    scores: list[Tensor] = []
    labels: list[Tensor] = []
    for step, batch in enumerate(loader):
        if max_steps and step >= max_steps:
            break
        res = objective(bare, batch)
        correct += res.correct
        total += res.count
        if res.scores is not None and res.labels is not None:
            scores.append(res.scores.detach().float().view(-1))
            labels.append(res.labels.detach().view(-1))
        if res.reciprocal_ranks is not None:
            rr_sum += float(res.reciprocal_ranks.sum())
            rr_count += res.reciprocal_ranks.numel()
    correct, total, rr_sum, rr_count, has_scores = all_reduce(
        [correct, total, rr_sum, rr_count, float(bool(scores))]
    )
    out = {"acc": correct / total if total else float("nan")}
    if rr_count:
        out["mrr"] = rr_sum / rr_count
    if has_scores:
        out["auc"] = binary_auc(*gather_scores(scores, labels))
    return out


def gather_scores(scores: list[Tensor], labels: list[Tensor]) -> tuple[Tensor, Tensor]:
    """Concatenate this rank's scores/labels with every other rank's (AUC needs all of them)."""
    s = torch.cat(scores) if scores else torch.empty(0)
    y = torch.cat(labels) if labels else torch.empty(0, dtype=torch.long)
    if not dist_ready():
        return s, y
    parts: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(parts, (s, y))
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def evaluate(
    model: nn.Module,
    loader: Iterable,
    *,
    objective: Objective = node_classification,
    max_steps: int = 0,
) -> float:
    """Accuracy over the seed rows (or labelled edges) of every batch, summed over ranks."""
    return eval_metrics(model, loader, objective=objective, max_steps=max_steps)["acc"]


class _Tracker(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...


@dataclass
class FitOptions:
    epochs: int = 1
    eval_every: int = 1  # evaluate every N epochs (and always after the last one)
    max_steps: int = 0  # cap on training batches per epoch (0: all)
    job_dir: str | None = None  # checkpoints go to <job_dir>/checkpoints/last.pt
    checkpoint: bool = True
    resume: bool = False


def fit(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train_loader: Iterable,
    opts: FitOptions,
    *,
    val_loader: Iterable | None = None,
    test_loader: Iterable | None = None,
    objective: Objective = node_classification,
    tracker: _Tracker | None = None,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, float]:
    """Train for `opts.epochs` epochs; returns the last epoch's metrics (with val/test acc).

    Per epoch: `loss, train_acc, val_acc, test_acc, epoch_time_s, seeds_per_s,
    sampled_edges_per_s, data_wait_frac` (+ `val_auc`, `test_auc` / `*_mrr` for links), logged to `tracker` with step = epoch. Rank 0 writes
    the checkpoint after every epoch; with `opts.resume` every rank restores it and continues
    after the saved epoch.
    """
    first = _resume(model, optimizer, opts)
    metrics: dict[str, float] = {}
    for epoch in range(first, opts.epochs):
        for loader in (train_loader, val_loader, test_loader):
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch)
        stats = train_epoch(
            model,
            train_loader,
            optimizer,
            objective=objective,
            max_steps=opts.max_steps,
            desc=f"epoch {epoch}",
        )
        metrics = {"epoch": float(epoch), **stats.as_metrics()}
        if (epoch + 1) % opts.eval_every == 0 or epoch == opts.epochs - 1:
            for split, loader in (("val", val_loader), ("test", test_loader)):
                if loader is not None:
                    found = eval_metrics(model, loader, objective=objective)
                    metrics.update({f"{split}_{k}": v for k, v in found.items()})
        _report(epoch, metrics, tracker, on_epoch)
        if opts.checkpoint and opts.job_dir and _rank() == 0:
            save_checkpoint(checkpoint_path(opts.job_dir), model, optimizer, epoch, metrics)
    return metrics


def _resume(model: nn.Module, optimizer: torch.optim.Optimizer, opts: FitOptions) -> int:
    """First epoch to run: 0, or one past the checkpointed epoch when resuming."""
    if not (opts.resume and opts.job_dir):
        return 0
    path = checkpoint_path(opts.job_dir)
    if not path.is_file():
        log.warning("train.resume=true but %s does not exist: starting from epoch 0", path)
        return 0
    state = load_checkpoint(path, model, optimizer)
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
