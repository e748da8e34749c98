"""What one batch yields: `StepResult`, the `Objective` signature, and the per-hop counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from torch import Tensor, nn


@dataclass
class StepResult:
    loss: Tensor  # mean loss of the batch (requires grad in training)
    # correct predictions among `count`: a 0-dim tensor on the batch's device, summed there
    # and read once per epoch (no host sync per step)
    correct: Tensor | float
    count: int  # seed nodes (or labelled edges) in the batch
    edges: int  # sampled edges in the batch
    scores: Tensor | None = None  # link objectives: scores of labelled edges (for AUC)
    labels: Tensor | None = None  # ... and their 0/1 labels
    reciprocal_ranks: Tensor | None = None  # link objectives: 1/rank of each positive


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
