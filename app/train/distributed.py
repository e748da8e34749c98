"""`train_distributed`: the main of one trainer process of a distributed job.

Steps: join the trainers' process group (gloo; CPU) at
`tcp://master_addr:ddp_port`, load this node's partition (memory-mapped), split its train /
val / test seeds across the node's trainers, build the distributed loaders (the first one joins
the job's RPC group), wrap the model in DDP and run `app.train.loop.fit`. The job's kind picks
the model, loaders and objective (`Task`): homogeneous node classification here,
heterogeneous node classification with `DistEmbedding` rows in `app.train.dist_hetero`, link
prediction on held-out edges in `app.train.dist_link`. Rank 0 logs to MLflow
(nested under `DISTGNN_MLFLOW_PARENT_RUN_ID` when a sweep set it), checkpoints every epoch and
writes the final metrics to `<job_dir>/result.json` (atomically) for the launcher.

Teardown (loaders, RPC, process group, MLflow run) runs in `finally` and each part at most once,
whatever failed. Waits are bounded: the rendezvous by `cluster.init_timeout_s`, collectives by
`COLLECTIVE_TIMEOUT_S` (ranks with more batches or slower evaluation are waited for, not
forever), RPC calls by `sampler.rpc_timeout_s`.
"""

from __future__ import annotations

import gc
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from app.config import Config
from app.distributed.context import DistContext
from app.distributed.feature_store import LocalFeatureStore
from app.distributed.graph_store import LocalGraphStore
from app.distributed.loader import DistNeighborLoader
from app.distributed.server import shutdown
from app.fsutil import write_text_atomic
from app.model.gnn import build_model
from app.partition.reader import PartitionData, load_partition
from app.runtime import Runtime
from app.tracking.mlflow import make_tracker
from app.train.loop import FitOptions, Objective, fit, node_classification
from app.train.metrics import all_reduce

log = logging.getLogger("distgnn.train")

PARENT_RUN_ENV = "DISTGNN_MLFLOW_PARENT_RUN_ID"
RESULT_FILE = "result.json"
RUN_ID_FILE = "mlflow_run_id"
COLLECTIVE_TIMEOUT_S = 1800.0
SPLITS = ("train", "val", "test")


def init_process_group(runtime: Runtime, cfg: Config) -> None:
    """Join the trainers' gloo group: rendezvous within init_timeout_s, then collectives.

    CPU only (gloo): the training loop does not move batches to a GPU yet.
    """
    store = dist.TCPStore(
        runtime.master_addr,
        runtime.ddp_port,
        runtime.world_size,
        is_master=runtime.rank == 0,
        timeout=timedelta(seconds=cfg.cluster.init_timeout_s),
        wait_for_workers=True,
    )
    dist.init_process_group(
        "gloo",
        store=store,
        rank=runtime.rank,
        world_size=runtime.world_size,
        timeout=timedelta(seconds=max(COLLECTIVE_TIMEOUT_S, cfg.cluster.init_timeout_s)),
    )


def my_share(ids: Tensor, runtime: Runtime, cap: int = 0) -> Tensor:
    """This trainer's contiguous slice of its node's seeds (at most `cap` if > 0)."""
    share = ids.tensor_split(runtime.procs_per_node)[runtime.local_rank]
    return share[:cap] if cap else share


@dataclass
class Session:
    """What a trainer set up, so teardown undoes exactly that, once."""

    runtime: Runtime
    cfg: Config
    loaders: list[Any] = field(default_factory=list)
    tracker: Any = None
    closed: bool = False

    def close(self, status: str) -> None:
        """Close loaders, leave RPC (stopping own samplers), the process group, the run."""
        if self.closed:
            return
        self.closed = True
        for loader in self.loaders:
            loader.close()
        try:
            ctx = DistContext.from_runtime(self.runtime)
            shutdown(ctx, self.cfg.cluster.init_timeout_s, failed=status != "FINISHED")
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
            if self.tracker is not None:
                self.tracker.end(status)


def loader_kwargs(session: Session) -> dict[str, Any]:
    """Sampler / RPC arguments shared by every distributed loader of this trainer."""
    rt, cfg = session.runtime, session.cfg
    s, ld = cfg.sampler, cfg.loader
    return dict(
        num_neighbors=s.num_neighbors,
        current_ctx=DistContext.from_runtime(rt),
        num_workers=ld.num_workers,
        concurrency=s.concurrency,
        replace=s.replace,
        subgraph_type=s.subgraph_type,
        disjoint=s.disjoint,
        temporal_strategy=s.temporal_strategy,
        time_attr=s.time_attr,
        master_addr=rt.master_addr,
        master_port=rt.rpc_port,
        rpc_timeout=s.rpc_timeout_s,
        init_timeout=cfg.cluster.init_timeout_s,
        seed=cfg.seed * 1000 + rt.rank,
    )


def eval_cap(cfg: Config) -> int:
    """Eval inputs per trainer in capped (bench / smoke) runs; 0: all."""
    return cfg.train.max_steps_per_epoch * cfg.loader.eval_batch_size


def _loaders(
    session: Session, seeds: dict[str, Tensor], stores: tuple[Any, Any], input_type: str | None
) -> dict[str, Any]:
    """Train / val / test node loaders over this trainer's share of the node's `seeds`."""
    rt, cfg = session.runtime, session.cfg
    ld = cfg.loader
    common = loader_kwargs(session)
    out = {}
    for split in SPLITS:
        train = split == "train"
        ids = my_share(seeds[split], rt, 0 if train else eval_cap(cfg))
        out[split] = DistNeighborLoader(
            stores,
            input_nodes=ids if input_type is None else (input_type, ids),
            batch_size=ld.batch_size if train else ld.eval_batch_size,
            shuffle=ld.shuffle and train,
            drop_last=ld.drop_last and train,
            **common,
        )
        session.loaders.append(out[split])
    return out


def _start_tracking(session: Session, part: Any) -> None:
    """Rank 0: open the job's MLflow run, log partition stats and the job's config files."""
    rt, cfg = session.runtime, session.cfg
    session.tracker = tracker = make_tracker(cfg, rt.rank)
    run_id = tracker.start(
        cfg,
        run_name=cfg.mlflow.run_name or f"{cfg.experiment or 'job'}-{Path(rt.job_dir).name}",
        parent_run_id=os.environ.get(PARENT_RUN_ENV) or None,
        tags={"job_dir": rt.job_dir, "num_nodes": str(rt.num_nodes), "launcher": "distgnn"},
    )
    if run_id is None:
        return
    job_dir = Path(rt.job_dir)
    write_text_atomic(job_dir / RUN_ID_FILE, run_id)
    tracker.log_metrics(partition_metrics(part.meta.get("stats", {})))
    tracker.log_artifact(rt.config_path)
    overrides = job_dir / ".hydra" / "overrides.yaml"
    if overrides.exists():
        tracker.log_artifact(overrides)


def num_classes(part: Any) -> int:
    """Classes in the whole graph: the largest label over every partition, plus one."""
    y = part.node_feats["feats"]["y"]
    (top,) = all_reduce([float(y.max()) if y.numel() else -1.0], op="max")
    return int(top) + 1


def partition_metrics(stats: dict[str, Any]) -> dict[str, float]:
    """META.json stats as flat metrics: `partition.edge_cut`, `partition.part0.halo`, ..."""
    out = {f"partition.{k}": v for k, v in stats.items() if isinstance(v, int | float)}
    for row in stats.get("parts", []):
        p = row.get("part")
        out.update({f"partition.part{p}.{k}": v for k, v in row.items() if k != "part"})
    return out


@dataclass
class Task:
    """What `fit` runs for the job's kind (homogeneous / heterogeneous nodes, or links)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    loaders: dict[str, Any]
    objective: Objective = node_classification
    finish: Callable[[], dict[str, float]] | None = None  # extra final metrics, every rank


def _ddp(model: nn.Module, find_unused: bool = False) -> DistributedDataParallel:
    return DistributedDataParallel(model, find_unused_parameters=find_unused)


def _adam(cfg: Config, model: nn.Module) -> torch.optim.Optimizer:
    t = cfg.train
    return torch.optim.Adam(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)


def _homo_task(session: Session, part: PartitionData, stores: tuple[Any, Any]) -> Task:
    """Homogeneous node classification: the configured model over the node's seeds."""
    cfg = session.cfg
    loaders = _loaders(session, part.seeds, stores, None)
    in_channels = int(part.node_feats["feats"]["x"].size(1))
    torch.manual_seed(cfg.seed)  # as train_single: same initial weights for the same seed
    model = _ddp(build_model(cfg.model, in_channels, num_classes(part)))
    return Task(model, _adam(cfg, model), loaders)


def _hetero_task(session: Session, part: PartitionData, stores: tuple[Any, Any]) -> Task:
    """Hetero node classification; featureless types read `DistEmbedding` rows (RPC is up)."""
    from app.train import dist_hetero as h

    rt, cfg = session.runtime, session.cfg
    target = h.target_type(part)
    seeds = {split: part.seeds[split][target] for split in SPLITS}
    loaders = _loaders(session, seeds, stores, target)
    embeddings = h.make_embeddings(rt, part, cfg.model.embedding_dim or cfg.model.hidden_channels)
    before = embeddings.probe()
    # a batch need not touch every edge type, and the last layer only feeds the target type
    model = _ddp(h.build_model(cfg, part, embeddings), find_unused=True)
    return Task(
        model,
        h.make_optimizer(cfg, model, embeddings),
        loaders,
        h.hetero_node_objective(target),
        lambda: h.embedding_change(before, embeddings),
    )


def _link_task(session: Session, part: PartitionData, stores: tuple[Any, Any]) -> Task:
    """Link prediction over this part's training edges; AUC / MRR on held-out edges."""
    from app.train import dist_link

    rt, cfg = session.runtime, session.cfg
    edges = dist_link.link_edges(rt, part, eval_cap(cfg))
    common = loader_kwargs(session)
    common.pop("time_attr")  # link loaders do not sample temporally
    loaders = dist_link.make_loaders(cfg, edges, stores, common)
    session.loaders.extend(loaders.values())
    model = _ddp(dist_link.build_model(cfg, part))
    return Task(model, _adam(cfg, model), loaders, dist_link.link_metrics_objective)


def _task(session: Session, part: PartitionData, stores: tuple[Any, Any]) -> Task:
    if session.cfg.train.objective == "link":
        return _link_task(session, part, stores)
    if part.is_hetero:
        return _hetero_task(session, part, stores)
    return _homo_task(session, part, stores)


def _log_shares(runtime: Runtime, loaders: dict[str, Any]) -> None:
    """One line per trainer: its seeds (edges for links) and train batches (uneven is expected).

    The `<name> seeds {json}` format is parsed by tests; keep it.
    """
    share = {s: int(ld._num_inputs()) for s, ld in loaders.items()}
    share["batches"] = len(loaders["train"])
    log.info("%s seeds %s", runtime.name, json.dumps(share))


def load_part(runtime: Runtime) -> tuple[PartitionData, tuple[LocalFeatureStore, LocalGraphStore]]:
    """This node's partition (memory-mapped) and the two stores over it."""
    part = load_partition(runtime.partition_root, runtime.node_rank, runtime.num_nodes, False)
    fs = LocalFeatureStore.from_partition_data(part)
    return part, (fs, LocalGraphStore.from_partition_data(part))


def train_distributed(runtime: Runtime, cfg: Config) -> dict[str, float]:
    """Train as one rank of the job; rank 0 also writes the final metrics to result.json."""
    session = Session(runtime, cfg)
    status = "FAILED"
    task = None
    try:
        init_process_group(runtime, cfg)
        part, stores = load_part(runtime)
        task = _task(session, part, stores)
        _log_shares(runtime, task.loaders)
        _start_tracking(session, part)
        t = cfg.train
        opts = FitOptions(
            epochs=t.epochs,
            eval_every=t.eval_every,
            max_steps=t.max_steps_per_epoch,
            job_dir=runtime.job_dir,
            checkpoint=t.checkpoint,
            resume=t.resume,
        )
        metrics = fit(
            task.model,
            task.optimizer,
            task.loaders["train"],
            opts,
            val_loader=task.loaders["val"],
            test_loader=task.loaders["test"],
            objective=task.objective,
            tracker=session.tracker,
        )
        if task.finish is not None:
            extra = task.finish()
            metrics.update(extra)
            if session.tracker is not None:
                session.tracker.log_metrics(extra, step=t.epochs - 1)
        result = {**metrics, "epochs_done": t.epochs, "world_size": runtime.world_size}
        if runtime.rank == 0:
            write_text_atomic(Path(runtime.job_dir) / RESULT_FILE, json.dumps(result, indent=1))
        status = "FINISHED"
        return result
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        # DDP's reducer must go before its process group: destroying it afterwards can hang.
        task = None
        gc.collect()
        session.close(status)
