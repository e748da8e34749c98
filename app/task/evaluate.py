"""The default evaluation of a task: sampled mini-batches of a split, metrics over every rank.

`sampled_eval(model, loader, objective)` runs the bare (unwrapped) model over a split's loader:
`acc` (correct / count), plus `auc` and `mrr` when the objective yields scores / reciprocal
ranks. Ranks may see different numbers of batches; only the final reductions are collective.
A task calls it from `Task.evaluate(split)`, the one seam an evaluator (e.g. layer-wise
full-neighbourhood inference) replaces.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from app.task.metrics import all_reduce, binary_auc, dist_ready
from app.task.step import Objective


@torch.no_grad()
def sampled_eval(model: nn.Module, loader: Iterable, objective: Objective) -> dict[str, float]:
    """`acc` over all ranks, plus `auc` / `mrr` when the objective yields scores / ranks."""
    model.eval()
    correct = total = rr_sum = rr_count = 0.0
    scores: list[Tensor] = []
    labels: list[Tensor] = []
    for batch in loader:
        res = objective(model, batch)
        correct += res.correct
        total += res.count
        if res.scores is not None and res.labels is not None:
            scores.append(res.scores.detach().float().view(-1).cpu())
            labels.append(res.labels.detach().view(-1).cpu())
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
