"""`LocalSource`: the whole graph in this process's memory (one node, one trainer, no RPC)."""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from app.config import Config, kernels_forced
from app.contract import SPLITS
from app.dataset.link_split import link_split, link_type
from app.labels import check_labels
from app.loader.protocol import TrainLoader
from app.placement import resolve_device
from app.task.source import EdgeType, GraphSource, Schema, eval_cap
from app.task.tables import LocalTables, Tables

log = logging.getLogger("distgnn.train")


def _num_classes(data: Data | HeteroData, store: Any) -> int:
    """The dataset's declared class count (its generator's `dataset.num_classes`) once the
    labels of `store` are in range (`app.labels`); a bare graph without one: max label + 1."""
    y = store.get("y") if store is not None else None
    if y is None or not y.numel():
        return 0
    declared = getattr(data, "num_classes", None)
    if declared is None:
        return int(y.max()) + 1
    labelled = None
    for split in SPLITS:
        mask = store.get(f"{split}_mask")
        if mask is not None:
            labelled = mask if labelled is None else labelled | mask
    check_labels(y, int(declared), "the dataset's labels y", labelled)
    return int(declared)


class LocalSource(GraphSource):
    """A `Data` / `HeteroData` held here; link prediction trains on its message graph."""

    def __init__(self, cfg: Config, data: Data | HeteroData) -> None:
        self.cfg, self.data = cfg, data
        self.device = resolve_device(cfg.train.device)
        self._links: tuple[Data | HeteroData, dict[str, Tensor]] | None = None
        self.loaders: list[TrainLoader] = []  # local loaders hold no resources
        self._sampler: Any = None  # the node loaders' shared torch sampler (sampler.device)
        self._rows: dict[str, Any] | None = None  # ... and their device features
        self._sampler_device: torch.device | None = None
        self._graph_sampler: Any = None  # a node loader's sampler: its CSC is of `data`

    def schema(self) -> Schema:
        d = self.data
        if not isinstance(d, HeteroData):
            return Schema([], [], {"": d.num_nodes}, {"": d.x.size(1)}, _num_classes(d, d), None)
        labelled = [t for t in d.node_types if "y" in d[t] and "train_mask" in d[t]]
        target = labelled[0] if len(labelled) == 1 else None
        return Schema(
            list(d.node_types),
            list(d.edge_types),
            {t: int(d[t].num_nodes) for t in d.node_types},
            {t: int(d[t].x.size(1)) for t in d.node_types if "x" in d[t]},
            _num_classes(d, d[target] if target else None),
            target,
        )

    def _make_view(self) -> Any:
        from app.inference import local_view

        if self.cfg.train.objective == "link":  # link tasks pass messages on train edges only
            return local_view(self._link_split()[0])
        return local_view(self.data, **self._held_for_view())

    def _held_for_view(self) -> dict[str, Any]:
        """What the node loaders' sampler and device features already hold of the graph (its
        CSC: the view's in-edge CSR, the same stable order, its sources where the sampler
        reads them; every row of `x` where the batches read it), so the layer-wise view
        builds and copies neither."""
        held: dict[str, Any] = {}
        sampler = self._graph_sampler
        if sampler is not None and not sampler.is_hetero:
            tensors = sampler.tensors
            row = torch.from_numpy(sampler.row) if tensors is None else tensors.row
            held["edges"] = (torch.from_numpy(sampler.colptr), row)
        x = (self._rows or {}).get("x")
        if x is not None and x.whole and x.cache.dtype == torch.float32:
            held["x"] = x.cache
        return held

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

    def sampler_device(self) -> torch.device:
        """Where the node loaders sample: `sampler.device`, auto resolved (once: the free memory
        it reads changes as loaders are made) to the trainer's GPU when it has one, the sample
        is one the torch twin draws and the CSC fits."""
        if self._sampler_device is None:
            self._sampler_device = self._resolve_sampler_device()
        return self._sampler_device

    def _resolve_sampler_device(self) -> torch.device:
        s, d = self.cfg.sampler, self.data
        if s.device == "cpu" or self.device.type != "cuda":
            return torch.device("cpu")
        if s.device == "cuda":
            return self.device
        from app.sampler.torch_kernel import fits

        plain = not (isinstance(d, HeteroData) or s.disjoint or s.time_attr)
        if plain and s.subgraph_type != "induced" and fits(self.device, d.num_nodes, d.num_edges):
            return self.device
        return torch.device("cpu")

    def _torch_sampler(self) -> Any:
        """One sampler for every split (one CSC on the device) when the torch twin samples:
        on the trainer's GPU, or on the CPU under DISTGNN_KERNELS=torch; else None."""
        device = self.sampler_device()
        if device.type == "cpu" and kernels_forced() != "torch":
            return None
        if self._sampler is None:
            from app.sampler import NeighborSampler

            s = self.cfg.sampler
            self._sampler = NeighborSampler(
                self.data, s.num_neighbors, **self._sampling(), time_attr=s.time_attr,
                temporal_strategy=s.temporal_strategy, seed=self.cfg.seed, device=device,
            )  # fmt: skip
        return self._sampler if self._sampler.tensors is not None else None

    def _features(self, device: torch.device) -> dict[str, Any]:
        """`x` (within `train.gpu_feature_bytes`, hottest rows first), `y` and the other narrow
        node attributes (`whole_attrs`: the split masks) for batches built on `device`, made
        once for every split (after the model is there: the auto budget measures it)."""
        if self._rows is None:
            from app.loader.batch import whole_attrs
            from app.loader.device_features import DeviceFeatures, auto_budget

            d, budget = self.data, self.cfg.train.gpu_feature_bytes
            budget = auto_budget(device) if budget < 0 else budget
            degree = torch.bincount(d.edge_index[0], minlength=d.num_nodes)
            self._rows = {"x": DeviceFeatures(d.x, device, budget, degree)}
            for key in whole_attrs(d):  # labels, masks: no host gather, no ids read back
                self._rows[key] = DeviceFeatures(d[key], device, 1 << 62)
            x = self._rows["x"]
            log.info("features: %d of %d rows on %s", x.cached_rows, x.num_rows, device)
        return self._rows

    def node_loader(self, split: str, seeds: Tensor, node_type: str | None) -> TrainLoader:
        from app.loader import NeighborLoader

        s = self.cfg.sampler
        loader = NeighborLoader(
            self.data,
            s.num_neighbors,
            input_nodes=seeds if node_type is None else (node_type, seeds),
            time_attr=s.time_attr,
            temporal_strategy=s.temporal_strategy,
            **self._sampling(),
            **self.batch_args(split),
            **self._feeding(),
            **self._on_device(),
        )
        self._graph_sampler = loader.sampler
        return loader

    def _on_device(self) -> dict[str, Any]:
        """The torch sampler and the device features, when the torch twin samples."""
        sampler = self._torch_sampler()
        if sampler is None:
            return {}
        return dict(sampler=sampler, features=self._features(sampler.tensors.device))

    def _feeding(self) -> dict[str, Any]:
        """A GPU trainer's batches are sampled ahead in `loader.num_workers` threads (by a GPU
        sampler on a stream per thread), and pinned there when sampled on the host; a CPU
        trainer samples in its own thread (its cores are the trainer's)."""
        gpu = self.device.type == "cuda"
        host_sampled = self.sampler_device().type == "cpu"
        threads = self.cfg.loader.num_workers if gpu else 0
        return dict(threads=threads, pin_memory=gpu and host_sampled)

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
