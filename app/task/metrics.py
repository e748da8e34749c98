"""Counts gathered during an epoch, summed across ranks, and the rates derived from them.

Every rank keeps raw sums (loss * seeds, correct predictions, seeds, edges, seconds), so the
all-reduce is a plain SUM and the job-wide rates are ratios of sums, never averages of
per-rank averages (ranks can see different numbers of batches).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch
import torch.distributed as dist
from torch import Tensor


def dist_ready() -> bool:
    """True when a default process group exists (the trainer runs under DDP)."""
    return dist.is_available() and dist.is_initialized()


def all_reduce(values: list[float], op: str = "sum") -> list[float]:
    """SUM (or MAX) `values` over all ranks; the identity without a process group."""
    if not dist_ready():
        return list(values)
    buf = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(buf, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return buf.tolist()


@dataclass
class EpochStats:
    """Sums over one training epoch (over all ranks after `reduced`)."""

    # sum over batches of loss * seeds, and correct predictions on seed nodes (or on
    # positive/negative labels): 0-dim device tensors during an epoch until `settle`
    loss_sum: float | Tensor = 0.0
    correct: float | Tensor = 0.0
    seeds: float = 0.0  # seed nodes (or labelled edges) trained on
    sampled_edges: float = 0.0  # edges in the sampled subgraphs
    steps: float = 0.0
    data_wait_s: float = 0.0  # waiting for the next batch from the loader
    compute_s: float = 0.0  # forward + backward + optimizer step
    wall_s: float = 0.0  # epoch wall time (MAX over ranks)

    def add(self, loss: float | Tensor, correct: float | Tensor, seeds: int, edges: int) -> None:
        """Count one step. `loss` and `correct` may be 0-dim tensors on the trainer's device:
        their sums then stay there (float64) until `settle`, so a step waits on no GPU work."""
        if isinstance(loss, Tensor):
            loss = loss.double()
        if isinstance(correct, Tensor):
            correct = correct.double()
        self.loss_sum = self.loss_sum + loss * seeds
        self.correct = self.correct + correct
        self.seeds += seeds
        self.sampled_edges += edges
        self.steps += 1

    def settle(self) -> None:
        """Read sums kept on a device into floats (the one host sync of an epoch's metrics)."""
        self.loss_sum, self.correct = float(self.loss_sum), float(self.correct)

    def reduced(self) -> EpochStats:
        """Job-wide stats: every field summed over ranks except the wall time (max)."""
        self.settle()
        names = [f.name for f in fields(self) if f.name != "wall_s"]
        sums = all_reduce([getattr(self, n) for n in names])
        (wall,) = all_reduce([self.wall_s], op="max")
        return EpochStats(**dict(zip(names, sums, strict=True)), wall_s=wall)

    @property
    def loss(self) -> float:
        return float(self.loss_sum) / max(self.seeds, 1)

    @property
    def accuracy(self) -> float:
        return float(self.correct) / max(self.seeds, 1)

    def as_metrics(self) -> dict[str, float]:
        """The per-epoch training metrics logged to the tracker."""
        wall = max(self.wall_s, 1e-9)
        busy = max(self.data_wait_s + self.compute_s, 1e-9)
        return {
            "loss": self.loss,
            "train_acc": self.accuracy,
            "epoch_time_s": self.wall_s,
            "seeds_per_s": self.seeds / wall,
            "sampled_edges_per_s": self.sampled_edges / wall,
            "data_wait_frac": self.data_wait_s / busy,
            "steps": self.steps,
        }

    def to_dict(self) -> dict[str, float]:
        self.settle()
        return asdict(self)


def binary_auc(scores: Tensor, labels: Tensor) -> float:
    """ROC-AUC of `scores` for binary `labels` (rank statistic, ties share their mean rank)."""
    labels = labels.bool()
    pos, neg = int(labels.sum()), int((~labels).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    sorted_scores, order = torch.sort(scores)
    _, counts = torch.unique_consecutive(sorted_scores, return_counts=True)
    last = torch.cumsum(counts, 0).to(torch.float64)
    ranks = torch.empty(len(scores), dtype=torch.float64)
    ranks[order] = (last - (counts - 1) / 2).repeat_interleave(counts)
    return float((ranks[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))


def mrr(pos_scores: Tensor, neg_scores: Tensor) -> float:
    """Mean reciprocal rank of each positive among its row of negatives `[P, K]`."""
    rank = 1 + (neg_scores >= pos_scores[:, None]).sum(dim=1)
    return float((1.0 / rank.to(torch.float64)).mean())
