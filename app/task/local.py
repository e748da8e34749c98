"""`LocalSource`: the whole graph in this process's memory (one node, one trainer, no RPC)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from app.config import Config
from app.dataset.link_split import link_split, link_type
from app.loader.protocol import TrainLoader
from app.placement import resolve_device
from app.task.source import EdgeType, GraphSource, Schema, eval_cap
from app.task.tables import LocalTables, Tables


def _max_label(y: Tensor | None) -> int:
    return int(y.max()) + 1 if y is not None and y.numel() else 0


class LocalSource(GraphSource):
    """A `Data` / `HeteroData` held here; link prediction trains on its message graph."""

    def __init__(self, cfg: Config, data: Data | HeteroData) -> None:
        self.cfg, self.data = cfg, data
        self.device = resolve_device(cfg.train.device)
        self._links: tuple[Data | HeteroData, dict[str, Tensor]] | None = None
        self.loaders: list[TrainLoader] = []  # local loaders hold no resources

    def schema(self) -> Schema:
        d = self.data
        if not isinstance(d, HeteroData):
            return Schema(
                [], [], {"": d.num_nodes}, {"": d.x.size(1)}, _max_label(d.get("y")), None
            )
        labelled = [t for t in d.node_types if "y" in d[t] and "train_mask" in d[t]]
        target = labelled[0] if len(labelled) == 1 else None
        return Schema(
            list(d.node_types),
            list(d.edge_types),
            {t: int(d[t].num_nodes) for t in d.node_types},
            {t: int(d[t].x.size(1)) for t in d.node_types if "x" in d[t]},
            _max_label(d[target].y) if target else 0,
            target,
        )

    def _make_view(self) -> Any:
        from app.inference import local_view

        link = self.cfg.train.objective == "link"  # link tasks pass messages on train edges only
        return local_view(self._link_split()[0] if link else self.data)

    def node_seeds(self, split: str, node_type: str | None) -> Tensor:
        store = self.data if node_type is None else self.data[node_type]
        ids = store[f"{split}_mask"].nonzero().view(-1)
        cap = eval_cap(self.cfg)
        return ids if split == "train" or not cap else ids[:cap]

    def _link_split(self) -> tuple[Data | HeteroData, dict[str, Tensor]]:
        if self._links is None:
            self._links = link_split(self.data, self.cfg.seed)
        return self._links

    def link_edges(self, split: str) -> tuple[EdgeType | None, Tensor]:
        edges = self._link_split()[1][split]
        cap = eval_cap(self.cfg)
        return link_type(self.data), edges if split == "train" or not cap else edges[:, :cap]

    def _sampling(self) -> dict[str, Any]:
        s = self.cfg.sampler
        return dict(replace=s.replace, subgraph_type=s.subgraph_type, disjoint=s.disjoint)

    def node_loader(self, split: str, seeds: Tensor, node_type: str | None) -> TrainLoader:
        from app.loader import NeighborLoader

        s = self.cfg.sampler
        return NeighborLoader(
            self.data,
            s.num_neighbors,
            input_nodes=seeds if node_type is None else (node_type, seeds),
            time_attr=s.time_attr,
            temporal_strategy=s.temporal_strategy,
            **self._sampling(),
            **self.batch_args(split),
            **self._feeding(),
        )

    def _feeding(self) -> dict[str, Any]:
        """A GPU trainer's batches are sampled ahead in `loader.num_workers` threads and pinned
        there; a CPU trainer samples in its own thread (its cores are the trainer's)."""
        gpu = self.device.type == "cuda"
        return dict(threads=self.cfg.loader.num_workers if gpu else 0, pin_memory=gpu)

    def link_loader(
        self, split: str, edges: Tensor, edge_type: EdgeType | None, mode: str, ratio: float
    ) -> TrainLoader:
        from app.loader import LinkNeighborLoader

        return LinkNeighborLoader(
            self._link_split()[0],
            self.cfg.sampler.num_neighbors,
            edge_label_index=edges if edge_type is None else (edge_type, edges),
            neg_sampling=mode,
            neg_sampling_ratio=ratio,
            **self._sampling(),
            **self.batch_args(split),
        )

    def embeddings(self, sizes: dict[str, int], dim: int) -> Tables:
        t = self.cfg.train
        torch.manual_seed(self.cfg.seed)
        return LocalTables(sizes, dim, t.sparse_optimizer, t.sparse_lr, self.device)
