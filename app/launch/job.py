"""Run one distributed training job: plan → partition → config → spawn → watch → result.

`run_job` is the one entry for every distributed job: a single `python -m app ...` run and each
job of a `-m` sweep (the Hydra launcher plugin calls the app's task function, which lands here)
go through the same code. Files in the job dir:

    config.yaml      the composed config every child loads (`app.config.load_config`)
    logs/<name>.log  each child's output, every line prefixed by `[name]`
    mlflow_run_id    written by the rank-0 trainer when its MLflow run starts
    launcher.pid     this launcher, until its MLflow run is ended (`app.launch.orphans`)
    result.json      final metrics, written atomically by the rank-0 trainer
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from app.config import Config, ConfigError, heartbeat_timeout_s, save_config
from app.contract import CONFIG_FILE, PARENT_RUN_ENV, RESULT_FILE, RUN_ID_FILE
from app.fsutil import die_with_parent, file_lock, remove_orphaned_temps, write_text_atomic
from app.jit.warm import ensure_warm
from app.launch.interrupt import say_outcome, stop_line
from app.launch.limits import check_host_memory
from app.launch.orphans import (
    PID_FILE,
    end_orphaned_runs,
    record_outcome,
    remove_pid_file,
    write_pid_file,
)
from app.launch.peers import PeerWatch
from app.launch.plan import EnvPlan, ProcessPlan, plan_job, plan_ports
from app.launch.precheck import (
    check_partition_root,
    check_ports_free,
    disk_full_as_one_line,
    verify_for_job,
)
from app.launch.pss import PssMonitor
from app.launch.spawn import JobFailed, run_procs
from app.partition.spec import PartitionSpec
from app.placement import gpus_shared, trainers_per_machine
from app.tracking.metric_keys import stored_metrics
from app.tracking.mlflow import check_store
from app.tracking.progress import phase, stage
from app.tracking.redact import restrict_job_files

__all__ = ["JobFailed", "run_job"]

log = logging.getLogger("distgnn")

ERROR_TAG_CHARS = 4000
PARTITION_LOCK_TIMEOUT_S = 4 * 3600.0


def partition_lock(spec: PartitionSpec):
    """Serialise partition creation across launchers sharing the output dir (env mode)."""
    return file_lock(
        Path(spec.output_dir) / "partitions.lock",
        PARTITION_LOCK_TIMEOUT_S,
        "another launcher partitioning this dataset",
    )


def prepare_partition(spec: PartitionSpec) -> Path:
    """Reuse or create the job's partition, once, before any child starts.

    Link prediction partitions the graph of its training edges only (held-out edges carry no
    messages), in a folder of its own: `app.partition.link.ensure_link_partition`.
    """
    from app.partition.task import ensure_partition

    with partition_lock(spec):
        if spec.link:
            from app.partition.link import ensure_link_partition

            return ensure_link_partition(spec)
        return ensure_partition(spec)


def partitions_dir(spec: PartitionSpec) -> Path:
    """Where this job's partition is written (for the "no space left" message)."""
    return Path(spec.partition.root or Path(spec.output_dir) / "partitions")


def _echo_names(plan: ProcessPlan) -> list[str]:
    """Console echo: this machine's first trainer (rank 0 in local/ssh mode)."""
    return [p.name for p in plan.procs if p.role == "trainer"][:1]


def run_job(cfg: Config, job_dir: Path, *, parent_run_id: str | None = None) -> dict[str, Any]:
    """Run `cfg` as a distributed job in `job_dir`; return the rank-0 trainer's final metrics.

    Raises:
        JobFailed: a child exited non-zero (name, exit code, last log lines).
        KeyboardInterrupt: Ctrl-C / SIGTERM; every child was stopped first.
    """
    job_dir = Path(job_dir).resolve()
    job_dir.mkdir(parents=True, exist_ok=True)
    for stale in (RESULT_FILE, RUN_ID_FILE):
        (job_dir / stale).unlink(missing_ok=True)
    remove_orphaned_temps(job_dir)  # a resumed job dir: those of an earlier, killed job
    extra = {PARENT_RUN_ENV: parent_run_id} if parent_run_id else {}
    ports = plan_ports(cfg.cluster, os.environ)  # also checks the env / ssh cluster description
    if cfg.mlflow.enabled:  # before any work: a server that is down is one line, not minutes
        check_store(cfg.tracking_uri)
    spec = PartitionSpec.from_config(cfg)
    check_partition_root(spec)
    with phase("partition"), disk_full_as_one_line(partitions_dir(spec)):
        partition_root = prepare_partition(spec)
    with phase("verify partition"):
        verify_for_job(cfg.cluster, partition_root)  # before any child: a corrupt file is one line
    plan = plan_job(cfg, job_dir, partition_root, ports, extra_env=extra)
    check_ports_free(cfg.cluster, plan)
    check_host_memory(cfg, partition_root)  # the written parts' sizes: one line, before spawn
    with phase("kernels"):  # cold cache: compile here once, not in every child at once
        ensure_warm()
    if isinstance(plan, EnvPlan):
        die_with_parent()  # torchrun / srun killed: take this node's share down with it
    save_config(cfg, job_dir / CONFIG_FILE)
    restrict_job_files(job_dir)  # config.yaml keeps real passwords for the children: 0600
    log.info(
        "job %s: %d processes on this machine (%s), ddp port %d, rpc port %d",
        job_dir.name,
        len(plan.procs),
        type(plan).__name__,
        plan.ports.ddp,
        plan.ports.rpc,
    )
    if gpus_shared(cfg):
        log.warning(
            "%d trainers on this machine share %d GPU(s) round-robin (DDP over gloo); give "
            "each trainer its own GPU for NCCL",
            trainers_per_machine(cfg),
            torch.cuda.device_count(),
        )
    if cfg.mlflow.enabled:  # runs a SIGKILLed launcher left RUNNING: KILLED (app.launch.orphans)
        end_orphaned_runs(Path(cfg.output_dir), cfg.tracking_uri, job_dir)
        write_pid_file(job_dir)
    status, error, peers = "FAILED", None, None
    memory = PssMonitor()
    memory.add(plan.node_rank if isinstance(plan, EnvPlan) else 0, os.getpid(), recursive=False)
    try:
        peers = peer_watch(cfg, plan)  # closed in `finally`: its thread must not outlive it
        with memory:
            run_procs(
                plan.procs,
                job_dir / "logs",
                echo=_echo_names(plan),
                shutdown_timeout_s=cfg.cluster.shutdown_timeout_s,
                heartbeat_timeout_s=heartbeat_timeout_s(cfg),
                peers=peers,
                memory=memory,
            )
        if peers is not None:
            peers.finish()
        status = "FINISHED"
        record_peak_pss(job_dir, memory.metrics(), plan)
    except JobFailed as err:
        error = err.culprit
        say_outcome(err, f"job failed: {err}")  # the children are gone: the culprit first
        raise
    except KeyboardInterrupt as err:
        status = "KILLED"
        sigterm = bool(err.args) and err.args[0] == "signal 15"
        error = "job terminated (SIGTERM)" if sigterm else "job interrupted (Ctrl-C)"
        say_outcome(err, stop_line(err))
        raise
    except BaseException as err:
        first = (str(err).strip().splitlines() or [""])[0]
        error = f"launcher: {type(err).__name__}: {first}"
        raise
    finally:
        if peers is not None:
            peers.close()
        for tmp in remove_orphaned_temps(job_dir):  # children are stopped: a killed writer's
            log.info("removed %s, left by a process killed while writing it", tmp)
        node = plan.node_rank if isinstance(plan, EnvPlan) else 0
        finish_tracking(cfg, job_dir, status, error, node, memory.metrics())
    return _read_result(job_dir, plan)


def record_peak_pss(job_dir: Path, peaks: dict[str, float], plan: ProcessPlan) -> None:
    """Log each host's peak PSS and add it to `result.json` (node 0's) and to
    `peak_pss-<node rank>.json`: env-mode launchers sharing a job dir (a testbed) each write
    their own host's."""
    if not peaks:
        return
    log.info(
        "peak PSS per host: %s",
        ", ".join(f"{k.split('/')[-1]} {v:.2f} GiB" for k, v in peaks.items() if "/" in k),
    )
    path = job_dir / RESULT_FILE
    if path.exists():
        write_text_atomic(path, json.dumps(json.loads(path.read_text()) | peaks, indent=1))
    rank = plan.node_rank if isinstance(plan, EnvPlan) else 0
    write_text_atomic(job_dir / f"peak_pss-{rank}.json", json.dumps(peaks, indent=1))


def peer_watch(cfg: Config, plan: ProcessPlan) -> PeerWatch | None:
    """Env mode across nodes: this launcher's watch over the others (`app.launch.peers`),
    through a store on the master address, port `rpc + 1`; None in other modes."""
    if not isinstance(plan, EnvPlan) or cfg.cluster.num_nodes < 2 or not plan.procs:
        return None
    master, port = plan.procs[0].runtime.master_addr, plan.ports.rpc + 1
    watch = PeerWatch(
        plan.node_rank,
        cfg.cluster.num_nodes,
        {0: master},
        port,
        heartbeat_timeout_s(cfg),
        cfg.cluster.heartbeat_s,
    )
    try:
        return watch.start()
    except OSError as err:
        raise ConfigError(
            f"launchers' liveness store, {master}:{port}: {err.strerror or err}"
        ) from None


def finish_tracking(
    cfg: Config,
    job_dir: Path,
    status: str,
    error: str | None,
    node_rank: int = 0,
    metrics: dict[str, float] | None = None,
) -> None:
    """End the job's run (`_close_tracking`), then drop `launcher.pid`. If the store could not
    be written (a full disk, a store gone), the pid file stays, holding the status and error
    the run should get: the next job under output_dir ends the run with them
    (`orphans.end_orphaned_runs`) once this launcher is gone."""
    if _close_tracking(cfg, job_dir, status, error, node_rank, metrics or {}):
        remove_pid_file(job_dir)
    else:
        record_outcome(job_dir, status, error)


def _read_result(job_dir: Path, plan: ProcessPlan) -> dict[str, Any]:
    path = job_dir / RESULT_FILE
    if path.exists():
        return json.loads(path.read_text())
    if isinstance(plan, EnvPlan) and plan.node_rank != 0:
        return {}  # the metrics are on node 0
    raise RuntimeError(f"every process exited 0 but the rank-0 trainer wrote no {path}")


def _close_tracking(
    cfg: Config,
    job_dir: Path,
    status: str,
    error: str | None = None,
    node_rank: int = 0,
    metrics: dict[str, float] | None = None,
) -> bool:
    """End the job's MLflow run with the job's status (a run that did not finish gets `error`,
    the culprit's line, as its `error` tag), after logging the launcher's `metrics` (peak PSS
    per host), then upload every child's log to it. Returns whether the run is ended (True
    too when there is no run to end). A job that did not finish makes each tracking call once,
    bounded (`http_store.bounded_http`): its culprit line is out already, and the store may be
    what failed.

    Only node 0, whose rank-0 trainer owns the run, ends it: another node of an env-mode job
    (sharing the job dir and store) adds its own view as `node<k>.status` / `node<k>.error`
    tags, so a node that ends last never overwrites node 0's culprit with its own."""
    run_file = job_dir / RUN_ID_FILE
    if not cfg.mlflow.enabled or not run_file.exists():
        return True
    from app.tracking.http_store import bounded_http

    run_id = run_file.read_text().strip()
    bounded = bounded_http() if status != "FINISHED" else contextlib.nullcontext()
    with bounded, stage(f"closing MLflow run {run_id} ({status}, uploading the logs)"):
        try:
            client = _store_client(cfg)
            for key, value in stored_metrics(metrics or {}).items():
                client.log_metric(run_id, key, value)
            if node_rank == 0:
                _end_run(client, run_id, status, error)
            else:
                _node_view(client, run_id, node_rank, status, error)
        except Exception as err:  # tracking must never hide the job's own outcome
            why = _first_line(cfg, err)
            log.warning(
                "could not end MLflow run %s (%s): %s; %s stays, so the next job ends it",
                run_id, status, why, PID_FILE,
            )  # fmt: skip
            return False
        try:
            if (job_dir / "logs").is_dir():
                from app.tracking.redact import redacted_copy

                with redacted_copy(job_dir / "logs") as logs:
                    client.log_artifacts(run_id, str(logs), artifact_path="logs")
        except Exception as err:
            log.warning(
                "could not upload the logs to MLflow run %s: %s", run_id, _first_line(cfg, err)
            )
    return True


def _store_client(cfg: Config) -> Any:  # -> mlflow.tracking.MlflowClient
    """A client of the job's store, once it is known to be writable or reachable."""
    from mlflow.tracking import MlflowClient

    from app.tracking.mlflow import quiet_mlflow

    quiet_mlflow()
    check_store(cfg.tracking_uri)  # fails at once where MLflow would retry for ~100 s
    return MlflowClient(tracking_uri=cfg.tracking_uri)


def _end_run(client: Any, run_id: str, status: str, error: str | None) -> None:
    """The run's `error` tag (a job that did not finish) and its status."""
    from app.tracking.redact import redact_text

    if status != "FINISHED":  # the launcher names the culprit: its line is the run's error
        line = (error or f"job ended {status}").strip().splitlines()[0]
        client.set_tag(run_id, "error", redact_text(line)[:ERROR_TAG_CHARS])
    # The launcher's outcome wins over the trainer's own: on Ctrl-C a trainer may first see
    # its sampler vanish and end the run FAILED; a job whose sampler crashed after the
    # trainer finished has failed all the same.
    if status != "FINISHED" or client.get_run(run_id).info.status == "RUNNING":
        client.set_terminated(run_id, status=status)


def _node_view(client: Any, run_id: str, node: int, status: str, error: str | None) -> None:
    """Node `node`'s outcome as its own tags on node 0's run, and a line in its own log."""
    from app.tracking.redact import redact_text

    tags = {f"node{node}.status": status}
    if status != "FINISHED":
        line = (error or f"job ended {status}").strip().splitlines()[0]
        tags[f"node{node}.error"] = redact_text(line)[:ERROR_TAG_CHARS]
    for key, value in tags.items():
        client.set_tag(run_id, key, value)
    log.info("node %d: %s (tag node%d.*); run %s is ended by node 0", node, status, node, run_id)


def _first_line(cfg: Config, err: Exception) -> str:
    """Why a tracking call failed, in one line (a full disk under the store named as such)."""
    from app.tracking.mlflow import store_full

    err = store_full(err, cfg.tracking_uri) or err
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
