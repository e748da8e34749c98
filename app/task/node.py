"""Node classification, homogeneous or heterogeneous (the labelled type of a hetero graph).

Homogeneous: `app.model.gnn.build_model` over the features, cross-entropy on the seed rows.
Heterogeneous: `HeteroSAGE` over every type, featureless types reading the source's embedding
tables, cross-entropy on the seed rows of the labelled type.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from app.loader.protocol import TrainLoader
from app.model.hetero import build_hetero_classifier
from app.model.registry import build_model
from app.task.base import Task
from app.task.step import StepResult, counts_of


class NodeTask(Task):
    """Cross-entropy on seed nodes; `acc` on val / test seeds."""

    def build_model(self) -> nn.Module:
        s, m = self.schema, self.cfg.model
        if not s.hetero:
            return build_model(m, s.widths[""], s.num_classes)
        if s.target is None:
            raise ValueError("expected exactly one labelled node type with train seeds")
        return build_hetero_classifier(
            m, s.metadata, self.in_channels(), s.num_classes, s.target, self.tables
        )

    def loader(self, split: str) -> TrainLoader:
        target = self.schema.target
        return self.source.node_loader(split, self.source.node_seeds(split, target), target)

    def step(self, model: nn.Module, batch: Any) -> StepResult:
        if self.schema.hetero:
            return hetero_node_step(model, batch, self.schema.target)
        return node_step(model, batch)


def node_step(model: nn.Module, batch: Any) -> StepResult:
    """Cross-entropy on the seed rows (`batch.batch_size` first rows) of a homogeneous batch."""
    nodes, hops = counts_of(batch)
    size = int(batch.batch_size)
    out = model(batch.x, batch.edge_index, nodes, hops)[:size]
    return _result(out, batch.y[:size].view(-1), int(batch.edge_index.size(1)))


def hetero_node_step(model: nn.Module, batch: Any, target: str) -> StepResult:
    """Cross-entropy on the seed rows of the `target` type (the model returns only those)."""
    out = model(batch)
    edges = sum(int(batch[et].edge_index.size(1)) for et in batch.edge_types)
    return _result(out, batch[target].y[: out.size(0)].view(-1), edges)


def _result(out: Tensor, y: Tensor, edges: int) -> StepResult:
    loss = F.cross_entropy(out, y)
    return StepResult(loss, (out.argmax(dim=-1) == y).sum(), out.size(0), edges)
