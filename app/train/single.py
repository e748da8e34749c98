"""`train_single`: the whole job in the Hydra process (one node, one trainer, no DDP, no RPC).

Loads the dataset, builds local NeighborLoaders over the train / val / test masks, the model and
Adam, runs `app.train.loop.fit` and logs to MLflow. The objective decides the batches and the
metric: node classification (homogeneous or, for `HeteroData`, on the labelled node type) or
link prediction (`train.objective=link`, AUC; paper → field_of_study links on `HeteroData`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data, HeteroData

from app.config import Config
from app.tracking.mlflow import Tracker, make_tracker
from app.train.loop import FitOptions, Objective, fit, node_classification

log = logging.getLogger("distgnn.train")


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (the loaders take their own seed from the config)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def split_nodes(data: Data | HeteroData, target: str | None) -> dict[str, torch.Tensor]:
    """Node ids of the train / val / test masks (of the `target` type for hetero graphs)."""
    store = data if target is None else data[target]
    return {s: store[f"{s}_mask"].nonzero().view(-1) for s in ("train", "val", "test")}


def node_loaders(cfg: Config, data: Data | HeteroData, target: str | None) -> dict[str, Any]:
    """Train (shuffled) and val / test NeighborLoaders; eval capped in smoke runs."""
    from app.loader import NeighborLoader

    s, ld = cfg.sampler, cfg.loader
    eval_cap = cfg.train.max_steps_per_epoch * ld.eval_batch_size
    out = {}
    for split, ids in split_nodes(data, target).items():
        train = split == "train"
        if not train and eval_cap:
            ids = ids[:eval_cap]
        out[split] = NeighborLoader(
            data,
            s.num_neighbors,
            input_nodes=ids if target is None else (target, ids),
            batch_size=ld.batch_size if train else ld.eval_batch_size,
            shuffle=ld.shuffle and train,
            drop_last=ld.drop_last and train,
            replace=s.replace,
            subgraph_type=s.subgraph_type,
            disjoint=s.disjoint,
            time_attr=s.time_attr,
            temporal_strategy=s.temporal_strategy,
            seed=cfg.seed,
        )
    return out


def _setup(
    cfg: Config, data: Data | HeteroData
) -> tuple[nn.Module, list[torch.optim.Optimizer], dict[str, Iterable], Objective]:
    """Model, optimizers, loaders and objective for the configured task."""
    t = cfg.train
    if cfg.train.objective == "link":
        from app.model.link import link_setup

        return link_setup(cfg, data)
    if isinstance(data, HeteroData):
        from app.model.hetero import hetero_setup

        return hetero_setup(cfg, data, node_loaders)
    from app.model.gnn import build_model

    model = build_model(cfg.model, data.x.size(1), int(data.num_classes))
    opt = torch.optim.Adam(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
    return model, [opt], node_loaders(cfg, data, None), node_classification


def train_single(
    cfg: Config,
    job_dir: str | Path | None = None,
    parent_run_id: str | None = None,
    tracker: Tracker | None = None,
) -> dict[str, float]:
    """Train in this process; returns the last epoch's metrics (loss, accuracies, rates).

    Without a `tracker` one is made from `cfg.mlflow` and its run opened and closed here
    (FAILED / KILLED on errors); a given tracker with an open run is logged to and left open.
    """
    from app.dataset import load_dataset

    seed_everything(cfg.seed)
    own = tracker is None or tracker.run_id is None
    tracker = tracker or make_tracker(cfg)
    if own:
        tags = {"job_dir": str(job_dir or ""), "launcher": "single"}
        tracker.start(cfg, parent_run_id=parent_run_id, tags=tags)
    try:
        data = load_dataset(cfg.dataset, cfg.seed)
        seed_everything(cfg.seed)  # same init whether or not the dataset came from the cache
        model, optimizers, loaders, objective = _setup(cfg, data)
        t = cfg.train
        opts = FitOptions(
            epochs=t.epochs,
            eval_every=t.eval_every,
            max_steps=t.max_steps_per_epoch,
            job_dir=str(job_dir) if job_dir is not None else None,
            checkpoint=t.checkpoint,
            resume=t.resume,
        )
        metrics = fit(
            model,
            _joint(optimizers),
            loaders["train"],
            opts,
            val_loader=loaders.get("val"),
            test_loader=loaders.get("test"),
            objective=objective,
            tracker=tracker,
        )
    except BaseException as exc:
        if own:
            tracker.__exit__(type(exc), exc, exc.__traceback__)
        raise
    if own:
        tracker.end()
    return metrics


def _joint(optimizers: list[torch.optim.Optimizer]) -> torch.optim.Optimizer:
    """One optimizer, or a `JointOptimizer` stepping dense and sparse ones together."""
    return optimizers[0] if len(optimizers) == 1 else JointOptimizer(optimizers)


class JointOptimizer(torch.optim.Optimizer):
    """Steps several optimizers as one (dense Adam + SparseAdam for embedding tables).

    Checkpoints store `state_dict()` as a list of the parts' state dicts.
    """

    def __init__(self, parts: list[torch.optim.Optimizer]) -> None:
        self.parts = parts
        params = [p for opt in parts for g in opt.param_groups for p in g["params"]]
        super().__init__(params, {})

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.parts:
            opt.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Any = None) -> None:
        for opt in self.parts:
            opt.step()

    def state_dict(self) -> dict[str, Any]:
        return {"parts": [opt.state_dict() for opt in self.parts]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for opt, state in zip(self.parts, state_dict["parts"], strict=True):
            opt.load_state_dict(state)
