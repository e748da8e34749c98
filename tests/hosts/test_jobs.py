"""The job across two hosts of the testbed (network namespaces on a bridge, one PID namespace
each), unchanged: ssh mode from h0, env mode from SLURM's variables and under one torchrun
agent per host. Each ends with the local run's metrics, every listener of the job on its own
host's address, and each host's bytes on the wire in result.json; a link cut mid-epoch or a
host's launcher SIGKILLed ends the job on every host, naming the other, leaving no process.

Skipped, with the reason, where the testbed cannot be made (not root, no netns, no sshd).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from app.testbed.net import Testbed, netns_pids
from app.testbed.sshd import state_dir
from tests.helpers.hosts import JOB, host_app, ssh_args
from tests.helpers.jobs import REPO, out_paths
from tests.helpers.torchrun import PYTHONPATH, torchrun_cmd

pytestmark = [pytest.mark.dist, pytest.mark.hosts]

ACCURACIES = ("train_acc", "val_acc", "test_acc")
BASE_PORT = 29500
RPC_TIMEOUT_S = 10.0
# A cut link ends the job after the heartbeat timeout (RPC_TIMEOUT_S / 2), the children's grace
# (3 s) and the launchers' MLflow bookkeeping, which a loaded host stretches (25 s in all seen at
# load 13 on 2 cores): far below what a job without the launchers' watch waits (the collective's
# timeout, minutes).
DETECT_SLACK_S = 20.0


def slurm_env(bed: Testbed, node: int) -> dict[str, str]:
    """What `srun --nodes=2 --ntasks-per-node=1` exports on node `node` (h0 launched it)."""
    return {
        "SLURM_NODEID": str(node),
        "SLURM_NNODES": "2",
        "SLURM_LAUNCH_NODE_IPADDR": bed.addr(0),
        "SLURM_JOB_ID": "4242",
    }


ENV_ARGS = ("cluster=env", "cluster.allow_remote=true", f"cluster.master_port={BASE_PORT}")


class Listeners:
    """Every TCP listener seen on each host while a job runs (`ss -ltnp` every 0.3 s)."""

    def __init__(self, bed: Testbed) -> None:
        self.bed, self.seen = bed, [set() for _ in range(bed.hosts)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            for i in range(self.bed.hosts):
                out = subprocess.run(
                    self.bed.netns_cmd(i, ["ss", "-Hltnp"]), capture_output=True, text=True
                ).stdout
                for line in out.splitlines():
                    cols = line.split()
                    addr, port = cols[3].rsplit(":", 1)
                    proc = re.search(r'\(\("([^"]+)"', line)
                    self.seen[i].add((addr, int(port), proc.group(1) if proc else "?"))
            self._stop.wait(0.3)

    def __enter__(self) -> Listeners:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def foreign(self, allowed: frozenset[str] = frozenset()) -> list[str]:
        """Listeners not on their own host's address (of processes not named in `allowed`)."""
        return [
            f"h{i} {addr}:{port} ({proc})"
            for i, seen in enumerate(self.seen)
            for addr, port, proc in sorted(seen)
            if addr != self.bed.addr(i) and proc not in allowed
        ]

    def job_ports(self, i: int) -> set[int]:
        return {port for addr, port, proc in self.seen[i] if port != 22}


def job_pids(bed: Testbed, i: int) -> list[int]:
    """Processes of a job left on host i (the testbed's sshd does not count)."""
    left = []
    for pid in netns_pids(bed.netns(i)):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "sshd" not in cmd:
            left.append(pid)
    return left


def wait_all(procs: list[subprocess.Popen], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(timeout=max(0.1, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def check_same_as_local(result: dict, local: dict) -> None:
    for key in ACCURACIES:
        assert abs(result[key] - local[key]) <= 0.015, (key, result[key], local[key])


def check_wire(result: dict) -> None:
    """Each host sent and received bytes during training and evaluation, about symmetric."""
    for phase in ("batch", "eval"):
        for h in (0, 1):
            assert result[f"wire_sent_bytes_per_{phase}_h{h}"] > 0
            assert result[f"wire_recv_bytes_per_{phase}_h{h}"] > 0
    assert result["wire_bytes_per_batch"] > 0


@contextmanager
def _logs_on_failure(*logs: Path) -> Iterator[None]:
    try:
        yield
    except BaseException:
        for log in logs:
            print(f"--- {log}\n{log.read_text()[-3000:] if log.exists() else '(none)'}")
        raise


def test_ssh_job_across_hosts(bed, made, local_run, tmp_path):
    job = tmp_path / "job"
    args = [*JOB, *out_paths(made), *ssh_args(bed, state_dir(bed.prefix) / "ip_config.txt")]
    args += [f"cluster.master_port={BASE_PORT}", f"hydra.run.dir={job}"]
    log = tmp_path / "launcher.log"
    with _logs_on_failure(log), Listeners(bed) as seen:
        assert wait_all([host_app(bed, 0, args, log)], 240) == [0]
    assert seen.foreign() == []
    assert seen.job_ports(1), "no listener of the job on h1: did node 1 run there?"
    result = json.loads((job / "result.json").read_text())
    check_same_as_local(result, local_run.result())
    check_wire(result)
    assert job_pids(bed, 0) == job_pids(bed, 1) == []


def test_env_job_from_slurm_variables(bed, made, local_run, tmp_path):
    job = tmp_path / "job"
    args = [*JOB, *out_paths(made), *ENV_ARGS, f"hydra.run.dir={job}"]
    logs = [tmp_path / f"node{i}.log" for i in (0, 1)]
    with _logs_on_failure(*logs), Listeners(bed) as seen:
        procs = [host_app(bed, i, args, logs[i], slurm_env(bed, i)) for i in (0, 1)]
        assert wait_all(procs, 240) == [0, 0]
    assert seen.foreign() == []
    assert seen.job_ports(1)
    result = json.loads((job / "result.json").read_text())
    check_same_as_local(result, local_run.result())
    check_wire(result)
    assert job_pids(bed, 0) == job_pids(bed, 1) == []


def _cut_job(bed, made, tmp_path):
    """A long SLURM-started job (rpc timeout 10 s: 5 s heartbeat timeout) and its two
    launchers, once it trains."""
    args = [*JOB, *out_paths(made), *ENV_ARGS, f"hydra.run.dir={tmp_path / 'job'}"]
    # A trainer blocked in a collective on a cut link answers SIGTERM only when killed: the
    # launcher's grace (cluster.shutdown_timeout_s) then adds to the heartbeat timeout.
    args += ["train.epochs=1000", f"sampler.rpc_timeout_s={RPC_TIMEOUT_S}"]
    args += ["cluster.shutdown_timeout_s=3"]
    logs = [tmp_path / f"node{i}.log" for i in (0, 1)]
    procs = [host_app(bed, i, args, logs[i], slurm_env(bed, i)) for i in (0, 1)]
    deadline = time.monotonic() + 180
    while "epoch 2:" not in logs[0].read_text():
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), logs[
            0
        ].read_text()[-3000:]
        time.sleep(0.2)
    return procs, logs


def test_cut_link_ends_the_job_on_every_host(bed, made, tmp_path):
    procs, logs = _cut_job(bed, made, tmp_path)
    try:
        bed.link(1, up=False)
        start = time.monotonic()
        codes = wait_all(procs, RPC_TIMEOUT_S + 30)
        took = time.monotonic() - start
    finally:
        bed.link(1, up=True)
    with _logs_on_failure(*logs):
        assert codes == [1, 1]
        assert took <= RPC_TIMEOUT_S + DETECT_SLACK_S, took
        text = [log.read_text() for log in logs]
        assert f"job failed: node 1 ({bed.addr(1)}) unreachable from node 0" in text[0]
        assert f"job failed: node 0 ({bed.addr(0)}) unreachable from node 1" in text[1]
        assert job_pids(bed, 0) == job_pids(bed, 1) == []


@pytest.mark.long
def test_launcher_killed_on_one_host_ends_the_other(bed, made, tmp_path):
    procs, logs = _cut_job(bed, made, tmp_path)
    launcher = [
        p for p in job_pids(bed, 1) if b"-m\0app\0" in Path(f"/proc/{p}/cmdline").read_bytes()
    ]
    assert launcher, "node 1's launcher not found"
    os.kill(launcher[0], signal.SIGKILL)
    start = time.monotonic()
    codes = wait_all(procs, RPC_TIMEOUT_S + 30)
    with _logs_on_failure(*logs):
        # node 0 fails at once when its trainer's connections to node 1 reset (the machine's
        # processes died with its launcher), or by the launchers' watch when they do not
        assert codes[0] == 1 and time.monotonic() - start <= RPC_TIMEOUT_S + 10
        assert "job failed: " in logs[0].read_text()
        assert job_pids(bed, 0) == job_pids(bed, 1) == []


@pytest.mark.long
def test_torchrun_job_across_hosts(bed, made, local_run, tmp_path):
    job = tmp_path / "job"
    logs = [tmp_path / f"node{i}.log" for i in (0, 1)]
    app = [
        *JOB,
        *out_paths(made),
        "cluster=env",
        "cluster.allow_remote=true",
        f"hydra.run.dir={job}",
    ]

    def agent(i: int) -> list[str]:
        # The hosts share one host name: torchrun is told which host serves the rendezvous
        # (is_host) and each agent's address (the MASTER_ADDR its workers get), not guessing
        # them from the name as it would on machines of their own.
        options = [
            f"--rdzv-conf=is_host={int(i == 0)}",
            f"--local-addr={bed.addr(i)}",
            "--monitor-interval=0.5",
        ]
        return torchrun_cmd(app, f"{bed.addr(0)}:{BASE_PORT}", rdzv_id="hosts", options=options)

    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    with _logs_on_failure(*logs), Listeners(bed) as seen:
        procs = []
        for i in (0, 1):
            with open(logs[i], "w") as fh:
                procs.append(subprocess.Popen(
                    bed.host_cmd(i, agent(i)), cwd=REPO, env=env, stdout=fh,
                    stderr=subprocess.STDOUT, start_new_session=True,
                ))  # fmt: skip
        assert wait_all(procs, 300) == [0, 0]
    # torchrun's agent (process `pt_elastic`) serves its rendezvous store and its workers'
    # store on every address of its host (torch's TCPStore): only those are left off.
    assert seen.foreign(allowed=frozenset({"pt_elastic"})) == []
    assert seen.foreign() and all(" (pt_elastic)" in f for f in seen.foreign())
    result = json.loads((job / "result.json").read_text())
    check_same_as_local(result, local_run.result())
    check_wire(result)
    assert job_pids(bed, 0) == job_pids(bed, 1) == []


@pytest.mark.long
def test_cut_link_in_ssh_mode_names_the_host(bed, made, tmp_path):
    args = [*JOB, *out_paths(made), *ssh_args(bed, state_dir(bed.prefix) / "ip_config.txt")]
    args += [f"cluster.master_port={BASE_PORT}", f"hydra.run.dir={tmp_path / 'job'}"]
    args += ["train.epochs=1000", f"sampler.rpc_timeout_s={RPC_TIMEOUT_S}"]
    args += ["cluster.shutdown_timeout_s=3"]
    log = tmp_path / "launcher.log"
    launcher = host_app(bed, 0, args, log)
    try:
        deadline = time.monotonic() + 180
        while "epoch 2:" not in log.read_text():
            assert time.monotonic() < deadline and launcher.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        bed.link(1, up=False)
        start = time.monotonic()
        codes = wait_all([launcher], RPC_TIMEOUT_S + 30)
        took = time.monotonic() - start
        # h1's sshd drops the session of a client silent for 5 s: the worker under it ends
        left = _until_empty(lambda: job_pids(bed, 1), 15)
    finally:
        bed.link(1, up=True)
    with _logs_on_failure(log):
        assert codes == [1] and took <= RPC_TIMEOUT_S + DETECT_SLACK_S, (codes, took)
        assert f"ssh to {bed.addr(1)} lost" in log.read_text()
        assert job_pids(bed, 0) == [] and left == []


def _until_empty(get, limit_s: float) -> list:
    deadline = time.monotonic() + limit_s
    while (left := get()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left
