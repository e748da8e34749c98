"""`train_distributed`: the main of one trainer process of a distributed job.

Steps: join the trainers' process group (nccl on cuda, gloo on cpu) at
`tcp://master_addr:ddp_port`, then source → task → fit: this node's partition
(`PartitionSource`, memory-mapped), joining the job's RPC group (`join_trainer`: the
loaders assume a joined group), the configured objective (`app.task.registry`), `app.train.loop.fit`. Rank 0 logs to MLflow (nested under
`DISTGNN_MLFLOW_PARENT_RUN_ID` when a sweep set it), checkpoints every epoch and writes the
final metrics to `<job_dir>/result.json` (atomically) for the launcher.

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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist

from app.config import Config
from app.contract import PARENT_RUN_ENV, RESULT_FILE
from app.distributed.context import DistContext
from app.distributed.group import join_trainer
from app.distributed.workers import shutdown
from app.fsutil import write_text_atomic
from app.loader.protocol import TrainLoader
from app.netutil import bound_store
from app.placement import ddp_backend
from app.runtime import Runtime, tune_process
from app.task.partitioned import PartitionSource
from app.task.registry import build_task
from app.tracking.mlflow import make_tracker
from app.tracking.progress import phase
from app.train.finite import result_json
from app.train.loop import FitOptions, epochs_done, eval_checkpoint, fit

log = logging.getLogger("distgnn.train")

COLLECTIVE_TIMEOUT_S = 1800.0


class MasterUnreachable(RuntimeError):
    """This trainer could not reach the job's master within the init timeout."""


def init_process_group(runtime: Runtime, cfg: Config) -> None:
    """Join the trainers' group (nccl on cuda, gloo on cpu): rendezvous within
    init_timeout_s, then collectives.

    A rank whose master (node 0's rank-0 trainer) never answers fails within init_timeout_s
    with one line naming node 0 and its address, not torch's socket error.
    """
    try:
        store = bound_store(  # listens on master_addr only (loopback by default)
            runtime.master_addr,
            runtime.ddp_port,
            runtime.world_size,
            runtime.rank == 0,
            cfg.cluster.init_timeout_s,
        )
    except dist.DistNetworkError as err:
        if runtime.rank == 0:
            raise
        raise MasterUnreachable(
            f"node 0 (rank-0 trainer at {runtime.master_addr}:{runtime.ddp_port}) did not "
            f"answer within cluster.init_timeout_s={cfg.cluster.init_timeout_s:g} s: start "
            "node 0's launcher, or check MASTER_ADDR / the network"
        ) from err
    dist.init_process_group(
        ddp_backend(cfg),
        store=store,
        rank=runtime.rank,
        world_size=runtime.world_size,
        timeout=timedelta(seconds=max(COLLECTIVE_TIMEOUT_S, cfg.cluster.init_timeout_s)),
    )


@dataclass
class Session:
    """What a trainer set up, so teardown undoes exactly that, once."""

    runtime: Runtime
    cfg: Config
    source: PartitionSource | None = None
    tracker: Any = None
    closed: bool = False

    def close(self, status: str) -> None:
        """Close loaders, leave RPC (stopping own samplers), the process group, the run."""
        if self.closed:
            return
        self.closed = True
        if self.source is not None:
            self.source.close()
        try:
            ctx = DistContext.from_runtime(self.runtime)
            shutdown(ctx, self.cfg.cluster.init_timeout_s, failed=status != "FINISHED")
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
            if self.tracker is not None:
                self.tracker.end(status)


def _start_tracking(session: Session, part: Any) -> None:
    """Rank 0: open the job's MLflow run, log partition stats and the job's config files."""
    rt, cfg = session.runtime, session.cfg
    session.tracker = tracker = make_tracker(cfg, rt.rank)
    run_id = tracker.start(  # also writes <job_dir>/mlflow_run_id for the launcher
        cfg,
        run_name=cfg.mlflow.run_name,  # None: a readable unique name from the overrides
        parent_run_id=os.environ.get(PARENT_RUN_ENV) or None,
        tags={"job_dir": rt.job_dir, "num_nodes": str(rt.num_nodes), "launcher": "distgnn"},
    )
    if run_id is None:
        return
    job_dir = Path(rt.job_dir)
    tracker.log_partition_stats(part.meta.get("stats", {}))
    tracker.log_artifact(rt.config_path)
    overrides = job_dir / ".hydra" / "overrides.yaml"
    if overrides.exists():
        tracker.log_artifact(overrides)


def _log_shares(runtime: Runtime, loaders: Mapping[str, TrainLoader]) -> None:
    """One line per trainer: its seeds (edges for links) and train batches (uneven is expected).

    The `<name> seeds {json}` format is parsed by tests; keep it.
    """
    share = {s: ld.num_inputs for s, ld in loaders.items()}
    share["batches"] = len(loaders["train"])
    log.info("%s seeds %s", runtime.name, json.dumps(share))


def trainer_main(runtime: Runtime, cfg: Config) -> int:
    """The trainer role's main (`app.launch.plan.ROLE_MAINS`): train, exit code 0."""
    train_distributed(runtime, cfg)
    return 0


def train_distributed(runtime: Runtime, cfg: Config) -> dict[str, float]:
    """Train as one rank of the job; rank 0 also writes the final metrics to result.json."""
    session = Session(runtime, cfg)
    status = "FAILED"
    task = None
    try:
        tune_process("trainer")  # torch / numba threads: this trainer's share of the node's cores
        with phase("process group"):
            init_process_group(runtime, cfg)
        with phase("load partition"):
            session.source = source = PartitionSource(runtime, cfg)
        with phase("RPC join"):
            join_trainer(
                source.ctx,
                source.stores,
                source.router,
                (runtime.master_addr, runtime.rpc_port),
                (cfg.sampler.rpc_timeout_s, cfg.cluster.init_timeout_s),
            )
        with phase("build task"):
            task = build_task(cfg, source)
        _log_shares(runtime, task.loaders)
        task.loaders["train"].prefetch()  # its first batches sample while tracking starts
        _start_tracking(session, source.part)
        with phase("ranks ready"):  # the first epoch starts together: no rank's epoch time
            dist.barrier()  # or data wait counts rank 0's tracker start-up
        opts = FitOptions.from_config(cfg.train, runtime.job_dir, eval_checkpoint(cfg))
        metrics = fit(task, opts, tracker=session.tracker)
        extra = task.finish()
        if extra:
            metrics.update(extra)
            if session.tracker is not None:
                session.tracker.log_metrics(extra, step=cfg.train.epochs - 1)
        done = epochs_done(cfg, metrics)
        result = {**metrics, "epochs_done": done, "world_size": runtime.world_size}
        if runtime.rank == 0:
            write_text_atomic(Path(runtime.job_dir) / RESULT_FILE, result_json(result))
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
