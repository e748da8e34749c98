"""`GraphSource`: where the graph lives, hidden behind one small interface.

A task (`app.task.node`, `app.task.link`) is written once against it; two sources exist:
`LocalSource` (a graph in this process's memory, one trainer) and `PartitionSource` (this
trainer's partition, other partitions over RPC, DDP across trainers). A source provides:

* `schema()`: node/edge types, node counts, feature widths, class count (all-reduced when
  partitioned) and the labelled type;
* `node_seeds(split)` / `link_edges(split)`: this trainer's share of the split (evaluation
  inputs capped at `max_steps_per_epoch * eval_batch_size` in capped runs);
* `node_loader` / `link_loader`: CPU batches in NeighborLoader layout, seeded by ONE rule,
  `seed * 1000 + rank` (rank 0 in one process);
* `embeddings(sizes, dim)`: learnable rows of featureless types with their sparse optimizer
  (`nn.Embedding` or `DistEmbedding`, see `app.task.tables`);
* `wrap(model)`: the model as trained (itself, or DDP) and `device`, where it runs.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from app.config import Config
from app.distributed.resident import DeviceRows
from app.loader.epochs import EpochBatching
from app.loader.protocol import TrainLoader
from app.task.tables import Tables

EdgeType = tuple[str, str, str]


@dataclass
class Schema:
    """What a model needs to know about the whole graph (identical on every trainer)."""

    node_types: list[str]  # [] for a homogeneous graph
    edge_types: list[EdgeType]
    num_nodes: dict[str, int]  # per node type ("" for a homogeneous graph)
    widths: dict[str, int]  # input feature width of each type that has features
    num_classes: int  # largest label over the whole graph + 1 (0 without labels)
    target: str | None  # the labelled node type of a heterogeneous graph

    @property
    def hetero(self) -> bool:
        return bool(self.node_types)

    @property
    def metadata(self) -> tuple[list[str], list[EdgeType]]:
        return list(self.node_types), [tuple(et) for et in self.edge_types]

    def featureless(self) -> dict[str, int]:
        """Node count of every type without input features (they get embedding tables)."""
        return {t: self.num_nodes[t] for t in self.node_types if t not in self.widths}


def loader_seed(cfg: Config, rank: int) -> int:
    """THE loader seed rule at every node count: `seed * 1000 + rank`."""
    return cfg.seed * 1000 + rank


def eval_cap(cfg: Config) -> int:
    """Eval inputs per trainer in capped (bench / smoke) runs; 0: all."""
    return cfg.train.max_steps_per_epoch * cfg.loader.eval_batch_size


class GraphSource(ABC):
    """The graph as one trainer sees it; see the module docstring."""

    cfg: Config
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    loaders: list[TrainLoader]  # loaders to close (distributed ones hold thread pools)

    @abstractmethod
    def schema(self) -> Schema: ...

    @abstractmethod
    def node_seeds(self, split: str, node_type: str | None) -> Tensor: ...

    @abstractmethod
    def link_edges(self, split: str) -> tuple[EdgeType | None, Tensor]:
        """(predicted edge type or None, this trainer's `[2, E]` positives of `split`)."""

    @abstractmethod
    def node_loader(self, split: str, seeds: Tensor, node_type: str | None) -> TrainLoader: ...

    @abstractmethod
    def link_loader(
        self, split: str, edges: Tensor, edge_type: EdgeType | None, mode: str, ratio: float
    ) -> TrainLoader: ...

    @abstractmethod
    def embeddings(self, sizes: dict[str, int], dim: int) -> Tables: ...

    @abstractmethod
    def _make_view(self) -> Any:
        """The `app.inference.GraphView` of what this trainer computes layer-wise."""

    def inference_view(self) -> Any:
        """The layer-wise inference view, built on first use (collective when partitioned)."""
        if getattr(self, "_view", None) is None:
            self._view = self._make_view()
        return self._view

    def wrap(self, model: nn.Module, find_unused: bool = False) -> nn.Module:
        """The module the training loop calls: the model itself (one trainer)."""
        return model

    def device_rows(self) -> DeviceRows | None:
        """Node rows held on the trainer's device that its loaders' batches leave out (a
        distributed trainer's, `app.distributed.resident`); None: batches carry every row."""
        return None

    def close(self) -> None:
        """Release the loaders and the inference view (before the runner tears down RPC)."""
        for loader in self.loaders:
            loader.close()
        self.loaders.clear()
        view, self._view = getattr(self, "_view", None), None
        if view is not None:
            view.close()

    def batching(self, split: str) -> EpochBatching:
        """How a `split` loader cuts its inputs: batch size, shuffle, drop_last, seed."""
        ld, train = self.cfg.loader, split == "train"
        return EpochBatching(
            batch_size=ld.batch_size if train else ld.eval_batch_size,
            shuffle=ld.shuffle and train,
            drop_last=ld.drop_last and train,
            seed=loader_seed(self.cfg, self.rank),
        )

    def batch_args(self, split: str) -> dict[str, Any]:
        """`batching(split)` as the local loaders' (PyG's) keyword arguments."""
        return dataclasses.asdict(self.batching(split))
