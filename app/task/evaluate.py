"""How a task evaluates its splits: exact layer-wise inference, or sampled mini-batches.

An evaluator is `(task, splits) -> {"<split>_<metric>": value}`, called by every rank from
`Task.evaluate`; `choose_evaluator` picks one per task:

* `layerwise_evaluator` (`train.eval_mode=layerwise`, a model with a per-layer forward):
  `app.inference` computes every layer of every node from its full in-neighbourhood, partition
  by partition, so the result is exact and each edge is touched once per layer; the graph view
  is built once by the source and reused every evaluation. Node classification: accuracy of
  the last layer's logits. Link prediction: the last layer is every node's embedding, and the
  task scores its held-out pairs and negatives from those rows (`Task.layerwise_results`),
  summarised like sampled batches.
* `sampled_evaluator`: each split's sampled loader through the task's `step`
  (`sampled_eval`): `acc` (correct / count), plus `auc` and `mrr` when the step yields scores /
  reciprocal ranks. Ranks may see different numbers of batches; only the final reductions
  are collective.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from app.config import Config
from app.loader.protocol import TrainLoader
from app.task.metrics import all_reduce, binary_auc, dist_ready
from app.task.source import GraphSource
from app.task.step import Objective, StepResult

log = logging.getLogger("distgnn.train")


class Evaluated(Protocol):
    """What an evaluator reads of a task (`app.task.base.Task` is one)."""

    cfg: Config
    bare: nn.Module  # the model without DDP: evaluation runs no collective in forward
    source: GraphSource  # `inference_view()`: the graph of layer-wise evaluation

    @property
    def loaders(self) -> Mapping[str, TrainLoader]: ...

    def step(self, model: nn.Module, batch: Any) -> StepResult: ...

    def layerwise_results(self, rows: Any, split: str) -> Iterable[StepResult]: ...


Evaluator = Callable[[Evaluated, tuple[str, ...]], dict[str, float]]


def sampled_evaluator(task: Evaluated, splits: tuple[str, ...]) -> dict[str, float]:
    """Each split's sampled loader through the task's own `step`, on the bare model."""
    out: dict[str, float] = {}
    for split in splits:
        found = sampled_eval(task.bare, task.loaders[split], task.step)
        out.update({f"{split}_{k}": v for k, v in found.items()})
    return out


def layerwise_evaluator(task: Evaluated, splits: tuple[str, ...]) -> dict[str, float]:
    """Every split's metrics from exact layer-wise inference (all ranks, one pass)."""
    from app.inference import evaluate_layerwise, layerwise_embeddings

    view, chunk = task.source.inference_view(), task.cfg.train.eval_chunk_size
    keep = task.cfg.train.eval_keep_buffers
    if task.cfg.train.objective == "node":
        return evaluate_layerwise(task.bare, view, chunk, splits, keep)
    rows = layerwise_embeddings(task.bare, view, chunk, keep)
    try:
        out: dict[str, float] = {}
        for split in splits:
            found = summarize(task.layerwise_results(rows, split))
            out.update({f"{split}_{k}": v for k, v in found.items()})
        return out
    finally:
        rows.close()


def choose_evaluator(task: Evaluated) -> Evaluator:
    """Layer-wise where configured and possible, else sampled (one line says why); either
    logs how long each evaluation took."""
    evaluator = sampled_evaluator
    if task.cfg.train.eval_mode == "layerwise":
        from app.inference import supports_layerwise

        evaluator = layerwise_evaluator if supports_layerwise(task.bare) else sampled_evaluator
    return _timed(evaluator)


def _timed(evaluator: Evaluator) -> Evaluator:
    """`evaluator`, logging one line with its wall time per call and returning it as
    `eval_time_s` (evaluation vs epoch time, in MLflow beside `epoch_time_s`)."""
    mode = "layer-wise" if evaluator is layerwise_evaluator else "sampled"

    @functools.wraps(evaluator)  # `__wrapped__` names the evaluator chosen
    def timed(task: Evaluated, splits: tuple[str, ...]) -> dict[str, float]:
        start = time.perf_counter()
        out = evaluator(task, splits)
        elapsed = time.perf_counter() - start
        log.info("%s evaluation of %s: %.2f s", mode, "+".join(splits), elapsed)
        return {**out, "eval_time_s": elapsed}

    return timed


@torch.no_grad()
def sampled_eval(model: nn.Module, loader: TrainLoader, objective: Objective) -> dict[str, float]:
    """`acc` over all ranks, plus `auc` / `mrr` when the objective yields scores / ranks."""
    model.eval()
    return summarize(objective(model, batch) for batch in loader)


def summarize(results: Iterable[StepResult]) -> dict[str, float]:
    """`acc` over all ranks, plus `auc` / `mrr` when the results carry scores / ranks.

    Collective: every rank calls it once, whatever number of results it has (possibly none).
    """
    correct = total = rr_sum = rr_count = 0.0
    scores: list[Tensor] = []
    labels: list[Tensor] = []
    for res in results:
        correct += float(res.correct)  # evaluation reads per batch (its scores do too)
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
