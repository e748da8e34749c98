"""`python -m app`'s dispatcher: a validated `Config` to partitioning, or to training (1 process or a job).

Single-process training (one node, one trainer) runs here in the Hydra process. Anything larger
is a distributed job: `app.launch.run_job` plans it, spawns every trainer and sampler process and
watches them — the same code for a single run and for each job of a multirun sweep.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from app.config import Config
from app.contract import PARENT_RUN_ENV
from app.tracking.redact import restrict_job_files

log = logging.getLogger("distgnn")


def job_dir() -> Path:
    """The Hydra output dir of the current job (run dir, or the sweep's job subdir)."""
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def is_single_process(cfg: Config) -> bool:
    return cfg.cluster.num_nodes == 1 and cfg.cluster.procs_per_node == 1


def run_task(cfg: Config) -> float | None:
    """Run `cfg.task`; return the value a Hydra sweeper optimises: `train.monitor` (val_acc
    by default, never a test metric), None when the job did not report it."""
    parent = os.environ.get(PARENT_RUN_ENV) or None
    restrict_job_files(job_dir())  # Hydra's copies of a password in the overrides: 0600
    if cfg.task == "partition":  # its stats: printed, in META.json, on every training run
        from app.partition.task import run_partition_task

        run_partition_task(cfg)  # no MLflow store opened: nothing to track but the files
        return None
    if is_single_process(cfg):
        from app.threads import budget_this_process
        from app.train.single import train_single

        budget_this_process()
        result = train_single(cfg, job_dir=job_dir(), parent_run_id=parent)
    else:
        from app.launch import run_job

        result = run_job(cfg, job_dir(), parent_run_id=parent)
    from app.tracking.summary import monitor_key, print_run_summary

    print_run_summary(cfg, job_dir(), result)  # metrics, job dir, MLflow run, UI command
    value = result.get(monitor_key(cfg))
    return float(value) if isinstance(value, int | float) else None
