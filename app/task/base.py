"""`Task`: one objective over a `GraphSource`: model, tables, optimizers, loaders, evaluation.

A subclass (`NodeTask`, `LinkTask`) writes only what the objective means: `build_model`
(from the source's schema and, for featureless types, the source's tables), `loader(split)`
and `step(model, batch) -> StepResult`. Everything else is shared:

* the model is built with the same seed on every rank, moved to `source.device` and wrapped
  by `source.wrap` (itself, or DDP);
* `optimizer`: `Optimizers` (Adam on the model, fused on a GPU, + the tables' sparse
  optimizer);
* `evaluate(splits)`: THE evaluation seam, `{"val_acc": ..., "test_acc": ...}`. The evaluator
  is chosen once by `app.task.evaluate.choose_evaluator`: exact layer-wise full-neighbourhood
  inference (`train.eval_mode=layerwise`, node classification, models with a per-layer
  forward) or each split's sampled loader through the task's own `step`;
* `state_dict()` / `load_state_dict()`: the checkpoint content, one format at every node count
  (`model`, `optimizer` {dense, sparse}, `embeddings` rows, `loader_epochs`: how many epochs
  each split's loader has started, so a resumed run shuffles and samples as the uninterrupted
  one would). Collective for distributed tables: call on every rank.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from app.config import Config
from app.contract import SPLITS
from app.loader.protocol import TrainLoader
from app.task.device import DeviceLoader
from app.task.evaluate import Evaluator, choose_evaluator
from app.task.optim import Optimizers
from app.task.source import GraphSource
from app.task.step import StepResult
from app.task.tables import Tables


class Task:
    """See the module docstring."""

    def __init__(self, cfg: Config, source: GraphSource) -> None:
        self.cfg, self.source = cfg, source
        self.schema = source.schema()
        self.tables: Tables | None = None
        featureless = self.schema.featureless()
        if featureless:
            self.tables = source.embeddings(featureless, self.embedding_dim)
        torch.manual_seed(cfg.seed)  # identical initial weights on every rank and node count
        self.bare = self.build_model().to(source.device)
        # hetero: a batch need not touch every edge type, so some weights get no gradient
        self.model = source.wrap(self.bare, find_unused=self.schema.hetero)
        t = cfg.train
        # fused on a GPU: a step's update in one or two kernels, not one per operation
        fused = True if source.device.type == "cuda" else None
        dense = torch.optim.Adam(
            self.bare.parameters(), lr=t.lr, weight_decay=t.weight_decay, fused=fused
        )
        self.optimizer = Optimizers(dense, self.tables)
        self.loaders: dict[str, DeviceLoader] = {
            s: DeviceLoader(self.loader(s), source.device, source.device_rows()) for s in SPLITS
        }
        self.evaluator: Evaluator = choose_evaluator(self)
        self._probe = self.tables.probe() if self.tables is not None else {}

    @property
    def embedding_dim(self) -> int:
        m = self.cfg.model
        return m.embedding_dim or m.hidden_channels

    def in_channels(self) -> dict[str, int]:
        """Input width of every node type: features, or the embedding width."""
        return {t: self.schema.widths.get(t, self.embedding_dim) for t in self.schema.node_types}

    def build_model(self) -> nn.Module:
        raise NotImplementedError

    def loader(self, split: str) -> TrainLoader:
        raise NotImplementedError

    def step(self, model: nn.Module, batch: Any) -> StepResult:
        raise NotImplementedError

    def layerwise_results(self, rows: Any, split: str) -> Iterable[StepResult]:
        """The step results of `split` scored from layer-wise embedding `rows` (link tasks;
        a node task's layer-wise evaluation reads the logits themselves)."""
        raise NotImplementedError(f"{type(self).__name__} has no layer-wise results")

    def evaluate(self, splits: tuple[str, ...]) -> dict[str, float]:
        """`{"<split>_<metric>": value}` over every rank (collective: every rank calls it)."""
        return self.evaluator(self, splits)

    def finish(self) -> dict[str, float]:
        """Extra final metrics (every rank): how far training moved the embedding rows."""
        return self.tables.change(self._probe) if self.tables is not None else {}

    def state_dict(self) -> dict[str, Any]:
        rows = self.tables.rows_state() if self.tables is not None else {}
        return {
            "model": self.bare.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "embeddings": rows,
            "loader_epochs": {s: loader.epoch for s, loader in self.loaders.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.bare.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"], state.get("embeddings"))
        for split, epoch in state.get("loader_epochs", {}).items():
            self.loaders[split].epoch = epoch
