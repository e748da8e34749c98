"""`train_single`: the whole job in the Hydra process (one node, one trainer, no DDP, no RPC).

source → task → fit: the dataset in memory (`LocalSource`), the configured objective
(`app.task.registry`), `app.train.loop.fit`, MLflow logging.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import torch

from app.config import Config
from app.contract import RESULT_FILE
from app.fsutil import write_text_atomic
from app.tracking.mlflow import Tracker, make_tracker
from app.tracking.progress import phase
from app.train.finite import result_json
from app.train.loop import FitOptions, epochs_done, eval_checkpoint, fit

log = logging.getLogger("distgnn.train")


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (the loaders take their own seed from the config)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


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
    from app.task.local import LocalSource
    from app.task.registry import build_task

    seed_everything(cfg.seed)
    own = tracker is None or tracker.run_id is None
    tracker = tracker or make_tracker(cfg)
    if own:
        tags = {"job_dir": str(job_dir or ""), "launcher": "single"}
        tracker.start(cfg, parent_run_id=parent_run_id, tags=tags)
    try:
        with phase("dataset"):
            data = load_dataset(cfg.dataset, cfg.seed)
        seed_everything(cfg.seed)  # same init whether or not the dataset came from the cache
        task = build_task(cfg, LocalSource(cfg, data))
        opts = FitOptions.from_config(
            cfg.train, str(job_dir) if job_dir is not None else None, eval_checkpoint(cfg)
        )
        metrics = fit(task, opts, tracker=tracker)
        extra = task.finish()
        if extra:
            metrics.update(extra)
            tracker.log_metrics(extra, step=cfg.train.epochs - 1)
    except BaseException as exc:
        if own:
            tracker.__exit__(type(exc), exc, exc.__traceback__)
        raise
    if own:
        tracker.end()
    if job_dir is not None:  # the same file a distributed job's rank 0 writes
        result = {**metrics, "epochs_done": epochs_done(cfg, metrics), "world_size": 1}
        write_text_atomic(Path(job_dir) / RESULT_FILE, result_json(result))
    return metrics
