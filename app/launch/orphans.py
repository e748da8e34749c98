"""Runs whose launcher was SIGKILLed: found by the next job, their MLflow run ended KILLED.

A launcher killed with SIGKILL runs no `finally`: its children die with it (PDEATHSIG), but its
MLflow run stays RUNNING forever. Each launcher therefore writes `<job_dir>/launcher.pid`
(host, pid, process start time) when its job starts and removes it once its run is ended. A
launcher that could not write the store (a full disk) keeps the file and records in it the
status and error the run should get (`record_outcome`). The next job under the same output_dir looks for pid files left
behind whose process is gone (on this host: the pid does not exist, or belongs to a process
started at another time), ends the run named in that job dir's `mlflow_run_id` (KILLED, or the
recorded outcome) with an `error` tag if it is still RUNNING, and removes the pid file once
that succeeded, so each is handled once. The
look-up is a directory listing; MLflow is opened only when a dead launcher was found.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from app.contract import RUN_ID_FILE
from app.fsutil import write_text_atomic
from app.tracking.redact import redact_text

log = logging.getLogger("distgnn")

PID_FILE = "launcher.pid"
JOB_GLOBS = ("runs/*", "multirun/*/*")
KILLED_ERROR = "launcher killed (SIGKILL or a crash of its machine): found by a later job"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def write_pid_file(job_dir: Path) -> Path:
    """Record this launcher in its job dir (removed by `remove_pid_file` when the job ends)."""
    pid = os.getpid()
    me = {"host": socket.gethostname(), "pid": pid, "start": _start_time(pid)}
    path = job_dir / PID_FILE
    write_text_atomic(path, json.dumps(me))
    return path


def remove_pid_file(job_dir: Path) -> None:
    (job_dir / PID_FILE).unlink(missing_ok=True)


def record_outcome(job_dir: Path, status: str, error: str | None) -> None:
    """Add the status and error the job's run should get to its pid file (the launcher could
    not write the store); the next job ends the run with them. Best effort: on a full disk
    the pid file keeps what it had, and the run is ended KILLED instead."""
    path = job_dir / PID_FILE
    try:
        rec = json.loads(path.read_text())
        rec |= {"status": status, "error": error or f"job ended {status}"}
        write_text_atomic(path, json.dumps(rec))
    except (OSError, ValueError):
        pass


def _outcome(job: Path) -> tuple[str, str]:
    """(status, error) a dead launcher's run gets: what it recorded, else KILLED."""
    try:
        rec = json.loads((job / PID_FILE).read_text())
    except (OSError, ValueError):
        rec = {}
    if rec.get("status") in ("FINISHED", "FAILED", "KILLED"):
        return rec["status"], rec.get("error") or KILLED_ERROR
    return "KILLED", KILLED_ERROR


def _dead(path: Path) -> bool:
    """Whether the launcher recorded in `path` is gone (only judged for this host)."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if rec.get("host") != socket.gethostname():
        return False
    return _start_time(int(rec["pid"])) != rec.get("start")


def dead_launcher_jobs(output_dir: Path, skip: Path) -> Iterator[Path]:
    """Job dirs under `output_dir` whose launcher died without ending its job (not `skip`)."""
    for pattern in JOB_GLOBS:
        for pid_file in output_dir.glob(f"{pattern}/{PID_FILE}"):
            job = pid_file.parent
            if job.resolve() != skip.resolve() and _dead(pid_file):
                yield job


def end_orphaned_runs(output_dir: Path, tracking_uri: str | None, skip: Path) -> list[str]:
    """End as KILLED the still-RUNNING MLflow runs of dead launchers; returns their run ids."""
    ended: list[str] = []
    jobs = list(dead_launcher_jobs(output_dir, skip))
    if not jobs:
        return ended
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    for job in jobs:
        run_file = job / RUN_ID_FILE
        status, error = _outcome(job)
        try:
            if run_file.exists() and tracking_uri:
                run_id = run_file.read_text().strip()
                if client.get_run(run_id).info.status == "RUNNING":
                    if status != "FINISHED":
                        client.set_tag(run_id, "error", redact_text(error)[:4000])
                    client.set_terminated(run_id, status=status)
                    ended.append(run_id)
                    log.warning(
                        "MLflow run %s of %s: its launcher could not end it; ended %s",
                        run_id,
                        job,
                        status,
                    )
        except Exception as err:  # another store, a deleted run: never block this job
            log.warning("could not end the MLflow run of %s: %s", job, err)
            continue  # the pid file stays: a later job tries again
        remove_pid_file(job)
    return ended
