"""`PartitionSource`: this trainer's partition; other partitions are reached over RPC.

Seeds: the node's seeds cut into contiguous shares across its trainers. Link positives: train
= the edges stored in this part (every edge lives with its destination's owner; heterogeneous:
those of `HETERO_LINK_TYPE`) cut across the node's trainers; val / test = the held-out edges
(`link_split.pt`) cut across all trainers.
The class count is the one the partition's META.json records (its dataset's), else
`dataset.num_classes`, never the largest label: every rank builds the same model, and each
checks its part's labels against it (`app.labels`) before training. The trainer joins the
job's RPC group (`app.distributed.group.join_trainer`) before the task builds its loaders.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Literal

import torch
from torch import Tensor, nn

from app.config import Config, kernels_forced
from app.dataset.link_split import HETERO_LINK_TYPE
from app.distributed.context import DistContext
from app.distributed.engine import BatchEngine, Schedule
from app.distributed.feature_store import FeatureStoreCore
from app.distributed.feeding import feeding_for
from app.distributed.graph_store import GraphStoreCore
from app.distributed.group import trainer_router
from app.distributed.inputs import Inputs, LinkInputs, NodeInputs
from app.distributed.resident import DeviceRows, ResidentRows, holdable_attrs
from app.distributed.sampler import DistNeighborSampler, SamplerOptions
from app.labels import check_labels
from app.loader.device_features import auto_budget
from app.loader.protocol import TrainLoader
from app.partition.link import load_held_out
from app.partition.reader import load_partition, load_partition_book
from app.placement import trainer_device, trainers_per_gpu
from app.runtime import Runtime
from app.task.ddp import wrap_ddp
from app.task.metrics import all_reduce
from app.task.source import EdgeType, GraphSource, Schema, eval_cap
from app.task.tables import Tables, make_dist_tables

log = logging.getLogger("distgnn.train")


class PartitionSource(GraphSource):
    """The partition of `runtime.node_rank`, memory-mapped, with distributed loaders."""

    def __init__(self, runtime: Runtime, cfg: Config) -> None:
        self.runtime, self.cfg = runtime, cfg
        self.rank, self.world_size = runtime.rank, runtime.world_size
        # local mode runs every node on this machine: its trainers are numbered by rank
        local = runtime.rank if cfg.cluster.mode == "local" else runtime.local_rank
        self.device = trainer_device(cfg, local)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        # checksums: checked by the launcher already, so this is one stat per file (the marker)
        self.part = load_partition(runtime.partition_root, runtime.node_rank, runtime.num_nodes)
        self.stores = (
            FeatureStoreCore.from_partition_data(self.part),
            GraphStoreCore.from_partition_data(self.part),
        )
        self.ctx = DistContext.from_runtime(runtime)
        # who serves each partition; the trainer joins RPC before any loader is built
        self.router = trainer_router(self.ctx, runtime.num_nodes)
        self.loaders: list[TrainLoader] = []
        self._device_rows: DeviceRows | None | Literal[False] = False  # False: not built yet

    def schema(self) -> Schema:
        part, meta = self.part, self.part.meta
        feats = part.node_feats
        if not part.is_hetero:
            f = feats["feats"]
            return Schema(
                [], [], {"": int(meta["num_nodes"])}, {"": int(f["x"].size(1))},
                self._num_classes(f.get("y"), part.node_feats["global_id"], None), None,
            )  # fmt: skip
        labelled = [t for t, nf in feats.items() if "y" in nf["feats"]]
        labelled = [t for t in labelled if t in part.seeds.get("train", {})]
        target = labelled[0] if len(labelled) == 1 else None
        return Schema(
            list(meta["node_types"]),
            [tuple(et) for et in meta["edge_types"]],
            {t: int(n) for t, n in meta["num_nodes"].items()},
            {t: int(nf["feats"]["x"].size(1)) for t, nf in feats.items() if "x" in nf["feats"]},
            self._num_classes(
                feats[target]["feats"]["y"] if target else None,
                feats[target]["global_id"] if target else None,
                target,
            ),
            target,
        )

    def _num_classes(self, y: Tensor | None, global_id: Tensor | None, ntype: str | None) -> int:
        """The class count (0 without labels anywhere), once this part's labels are in range
        and its seeds labelled (`LabelError` naming its node_feats.pt). A collective."""
        (top,) = all_reduce([float(y.max()) if y is not None and y.numel() else -1.0], op="max")
        if top < 0:
            return 0
        meta = self.part.meta
        num_classes = int(meta.get("num_classes") or self.cfg.dataset.num_classes)
        if y is not None and global_id is not None and y.numel() == y.size(0):
            seeds = [s if ntype is None else s.get(ntype) for s in self.part.seeds.values()]
            ids = [s for s in seeds if isinstance(s, Tensor)]
            labelled = torch.isin(global_id, torch.cat(ids)) if ids else None
            path = self.part.root / f"part_{self.part.index}" / "node_feats.pt"
            check_labels(y, num_classes, path, labelled)
        return num_classes

    def _make_view(self) -> Any:
        from app.inference import partition_view

        return partition_view(self.part, self.ctx)

    def _share(self, ids: Tensor, cap: int) -> Tensor:
        rt = self.runtime
        share = ids.tensor_split(rt.procs_per_node)[rt.local_rank]
        return share[:cap] if cap else share

    def node_seeds(self, split: str, node_type: str | None) -> Tensor:
        seeds = self.part.seeds[split]
        seeds = seeds if node_type is None else seeds[node_type]
        return self._share(seeds, 0 if split == "train" else eval_cap(self.cfg))

    def link_edges(self, split: str) -> tuple[EdgeType | None, Tensor]:
        rt = self.runtime
        edge_type = HETERO_LINK_TYPE if self.part.is_hetero else None
        if split == "train":
            g = self.part.graph if edge_type is None else self.part.graph[edge_type]
            local = torch.stack([g["row"], g["col"]])
            return edge_type, local.tensor_split(rt.procs_per_node, dim=1)[rt.local_rank]
        held = load_held_out(self.part.root)[split]
        share = held.tensor_split(rt.world_size, dim=1)[rt.rank]
        cap = eval_cap(self.cfg)
        return edge_type, share[:, :cap] if cap else share

    def _engine(self, split: str, inputs: Inputs, sampler: DistNeighborSampler) -> BatchEngine:
        """A loader of `inputs` with `sampler` (built once from `cfg.sampler`), the split's
        batching, and this trainer's feeding mode (its sampler processes, or its threads); the
        train loader knows its `Schedule` (epochs, batches per epoch) to keep its window full."""
        s, t = self.cfg.sampler, self.cfg.train
        feeding = feeding_for(self.ctx, self.cfg.loader.num_workers, s.concurrency, s.rpc_timeout_s)
        plan = Schedule(t.epochs, t.max_steps_per_epoch) if split == "train" else None
        loader = BatchEngine(sampler, inputs, self.batching(split), feeding, schedule=plan)
        self.loaders.append(loader)
        return loader

    def _sampler(self, temporal: bool) -> DistNeighborSampler:
        """The sampler `cfg.sampler` describes (`temporal=False` drops `time_attr`: link
        loaders sample no time), leaving out the rows this trainer holds (`device_rows`)."""
        options = SamplerOptions.from_config(self.cfg.sampler)
        if not temporal:
            options = dataclasses.replace(options, time_attr=None)
        rows = self.device_rows()
        if rows is not None:
            options = dataclasses.replace(options, resident_rows=rows.num_rows)
        return DistNeighborSampler(self.stores, options=options, router=self.router)

    def device_rows(self) -> DeviceRows | None:
        """The rows of this partition and its node's caches that this trainer holds on its
        GPU (`app.distributed.resident`), within `train.gpu_feature_bytes`; built once, after
        the model (the default budget measures it). None on a CPU trainer (but under
        DISTGNN_KERNELS=torch, which runs the GPU path on the CPU), for heterogeneous graphs,
        partitions with node times or without node attributes, temporal sampling, or when no
        row fits."""
        if self._device_rows is False:
            attrs = holdable_attrs(self.stores[0])
            on_device = self.device.type == "cuda" or kernels_forced() == "torch"
            temporal = self.cfg.sampler.time_attr is not None  # its samplers refuse held rows
            held = on_device and not temporal and bool(attrs)
            self._device_rows = self._hold(attrs) if held else None
        return self._device_rows

    def _hold(self, attrs: list[str]) -> DeviceRows | None:
        """The first rows of the resident order that fit the budget, copied to the device."""
        cfg, (fs, gs) = self.cfg, self.stores
        fs.router = fs.router or self.router  # the caches fill over RPC
        fs.use_cache(cfg.sampler.feature_cache_size, gs, cfg.sampler.hot_cache_bytes)
        budget = cfg.train.gpu_feature_bytes
        if budget < 0:  # what the GPU has left, shared with the trainers on the same GPU
            budget = auto_budget(self.device) // trainers_per_gpu(cfg)
        index = ResidentRows(fs, gs, 1 << 62)  # everything that could be held
        total = index.num_rows
        k = min(total, budget // max(1, fs.row_nbytes(None)))
        if k < total:
            index = ResidentRows(fs, gs, k)
        log.info("features: %d of %d partition and cache rows on %s", k, total, self.device)
        return DeviceRows(index, attrs, self.device) if k else None

    def node_loader(self, split: str, seeds: Tensor, node_type: str | None) -> TrainLoader:
        sampler, seeds = self._sampler(temporal=True), seeds.to(torch.int64)
        times = sampler.graph_store.node_time(node_type)[seeds] if sampler.temporal else None
        return self._engine(split, NodeInputs(seeds, node_type, times), sampler)

    def link_loader(
        self, split: str, edges: Tensor, edge_type: EdgeType | None, mode: str, ratio: float
    ) -> TrainLoader:
        sampler = self._sampler(temporal=False)
        gs = sampler.graph_store
        src, dst = (None, None) if edge_type is None else (edge_type[0], edge_type[-1])
        inputs = LinkInputs(
            edges.to(torch.int64),
            edge_type,
            gs.num_nodes(src),
            gs.num_nodes(dst),
            None,
            mode,
            float(ratio or 1.0),
        )
        return self._engine(split, inputs, sampler)

    def embeddings(self, sizes: dict[str, int], dim: int) -> Tables:
        rt, t = self.runtime, self.cfg.train
        return make_dist_tables(
            sizes,
            dim,
            t.sparse_optimizer,
            t.sparse_lr,
            self.device,
            book_of=lambda nt: load_partition_book(self.part.root, nt),
            part_id=rt.node_rank,
            is_owner=rt.local_rank == 0,
        )

    def wrap(self, model: nn.Module, find_unused: bool = False) -> nn.Module:
        """DDP over the trainers (each on its device: `trainer_device`), with the configured
        gradient buckets and compression hook (`app.task.ddp`)."""
        t = self.cfg.train
        return wrap_ddp(model, self.device, find_unused, t.ddp_comm_hook, t.ddp_bucket_cap_mb)
