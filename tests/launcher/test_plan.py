"""Process plans for local / env / ssh modes: ranks, ports, env and command construction."""

from __future__ import annotations

import math
import os
import shlex
from pathlib import Path

import pytest

from app.config import ConfigError
from app.launch.plan import (
    EnvPlan,
    LocalPlan,
    Ports,
    SshPlan,
    free_ports,
    huge_heap_tunables,
    plan_job,
    plan_ports,
    read_ip_config,
)
from app.runtime import Runtime

PORTS = Ports(ddp=29500, rpc=29501)


def _plan(cfg, tmp_path, ports=PORTS, **kw):
    return plan_job(cfg, tmp_path / "job", tmp_path / "parts", ports, cores=8, **kw)


def test_local_plan_ranks_names_and_env(compose, tmp_path):
    cfg = compose("cluster.num_nodes=2", "cluster.procs_per_node=2", "loader.num_workers=1")
    plan = _plan(cfg, tmp_path, extra_env={"DISTGNN_MLFLOW_PARENT_RUN_ID": "abc"})
    assert isinstance(plan, LocalPlan)
    assert len(plan.procs) == 2 * 2 * (1 + 1)
    names = [p.name for p in plan.procs]
    assert len(set(names)) == len(names)
    rts = [p.runtime for p in plan.procs]
    assert sorted(r.rpc_rank for r in rts) == list(range(rts[0].rpc_world_size))
    trainers = [r for r in rts if r.role == "trainer"]
    assert sorted(r.rank for r in trainers) == [0, 1, 2, 3]
    assert {r.worker_index for r in rts if r.role == "sampler"} == {0}
    for p in plan.procs:
        assert p.host == "127.0.0.1"
        assert p.cmd[1:] == ["-m", "app.launch.worker"]
        assert Runtime.from_env(p.env) == p.runtime  # env round-trips to the same identity
        assert (p.runtime.ddp_port, p.runtime.rpc_port) == (29500, 29501)
        assert p.env["OMP_NUM_THREADS"] == "1"  # 8 cores / 8 processes
        assert p.env["PYTHONUNBUFFERED"] == "1"
        assert p.env["THP_MEM_ALLOC_ENABLE"] == os.environ.get("THP_MEM_ALLOC_ENABLE", "1")
        assert "glibc.malloc.hugetlb=" in p.env["GLIBC_TUNABLES"]
        assert p.env["GLOO_SOCKET_IFNAME"] == p.env["TP_SOCKET_IFNAME"] != ""  # loopback only
        assert p.env["DISTGNN_MLFLOW_PARENT_RUN_ID"] == "abc"
        assert p.runtime.config_path == str((tmp_path / "job" / "config.yaml").resolve())
        assert p.runtime.partition_root == str((tmp_path / "parts").resolve())


def test_huge_heap_tunable_keeps_the_users_tunables():
    assert huge_heap_tunables("") == "glibc.malloc.hugetlb=1"
    assert huge_heap_tunables("glibc.malloc.arena_max=2") == (
        "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    )
    assert huge_heap_tunables("glibc.malloc.hugetlb=0") == "glibc.malloc.hugetlb=0"


def test_threads_per_process_at_least_one(compose, tmp_path):
    cfg = compose("cluster.num_nodes=2", "loader.num_workers=0")
    plan = plan_job(cfg, tmp_path, tmp_path, PORTS, cores=8)
    assert {p.env["OMP_NUM_THREADS"] for p in plan.procs} == {"4"}
    plan = plan_job(cfg, tmp_path, tmp_path, PORTS, cores=1)
    assert {p.env["MKL_NUM_THREADS"] for p in plan.procs} == {"1"}


def test_fixed_thread_count_is_the_same_in_local_and_env_mode(compose, tmp_path):
    """A 2-node job on one 2-core host: local mode splits the cores between both nodes (1
    thread each), torchrun's env mode between one node's processes (2): their reductions
    differ in the last bits (issue 28 #10). `cluster.threads_per_proc` fixes the count."""
    two = ("cluster.num_nodes=2", "loader.num_workers=0", "cluster.allow_remote=true")
    env = {**TORCHRUN_ENV, "MASTER_ADDR": "127.0.0.1"}

    def threads(*extra: str) -> set[str]:
        local = plan_job(compose(*two, *extra), tmp_path, tmp_path, PORTS, cores=2)
        ecfg = compose(*two, "cluster.mode=env", *extra)
        remote = plan_job(ecfg, tmp_path, tmp_path, environ=env, cores=2)
        return {p.env["OMP_NUM_THREADS"] for p in (*local.procs, *remote.procs)}

    assert threads() == {"1", "2"}  # the default: the cores of a machine, split
    assert threads("cluster.threads_per_proc=1") == {"1"}
    assert threads("cluster.threads_per_proc=3") == {"3"}
    with pytest.raises(ConfigError, match="cluster.threads_per_proc"):
        compose("cluster.threads_per_proc=-1")


def test_local_ports_free_and_distinct(compose):
    cfg = compose("cluster.num_nodes=2")
    ports = plan_ports(cfg.cluster, {})
    assert ports.ddp != ports.rpc
    assert len(set(free_ports(4))) == 4


def test_master_port_decides_both_ports(compose):
    cfg = compose("cluster.num_nodes=2", "cluster.master_port=31000")
    assert plan_ports(cfg.cluster, {}) == Ports(ddp=31000, rpc=31001)


def test_ports_must_differ():
    with pytest.raises(ConfigError, match="must differ"):
        Ports(ddp=1234, rpc=1234)


TORCHRUN_ENV = {
    "GROUP_RANK": "1",
    "GROUP_WORLD_SIZE": "2",
    "RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "0",
    "LOCAL_WORLD_SIZE": "1",
    "MASTER_ADDR": "10.0.0.5",
    "MASTER_PORT": "29400",
}


def test_env_plan_runs_only_this_nodes_share(compose, tmp_path):
    cfg = compose(
        "cluster.mode=env",
        "cluster.num_nodes=2",
        "loader.num_workers=2",
        "cluster.allow_remote=true",
    )
    plan = plan_job(cfg, tmp_path, tmp_path, environ=TORCHRUN_ENV, cores=6)
    assert isinstance(plan, EnvPlan) and plan.source == "torchrun"
    assert plan.node_rank == 1
    assert [p.name for p in plan.procs] == ["trainer1-0", "sampler1-0-0", "sampler1-0-1"]
    assert plan.ports == Ports(ddp=29401, rpc=29402)  # torchrun's store keeps MASTER_PORT
    for p in plan.procs:
        assert p.runtime.master_addr == "10.0.0.5"
        assert p.runtime.num_nodes == 2
        assert p.env["OMP_NUM_THREADS"] == "2"


def test_env_plan_slurm(compose, tmp_path):
    cfg = compose(
        "cluster.mode=env",
        "cluster.num_nodes=3",
        "cluster.master_port=40000",
        "cluster.allow_remote=true",
    )
    env = {"SLURM_NODEID": "2", "SLURM_NNODES": "3", "SLURM_LAUNCH_NODE_IPADDR": "10.1.1.1"}
    plan = plan_job(cfg, tmp_path, tmp_path, environ=env, cores=4)
    assert isinstance(plan, EnvPlan) and plan.source == "slurm"
    assert [p.runtime.rank for p in plan.procs if p.role == "trainer"] == [2]
    assert plan.ports == Ports(ddp=40001, rpc=40002)
    assert plan.procs[0].runtime.master_addr == "10.1.1.1"


def test_env_plan_node_count_mismatch_is_clear(compose, tmp_path):
    cfg = compose("cluster.mode=env", "cluster.num_nodes=4")
    with pytest.raises(ConfigError, match=r"cluster.num_nodes=4 but torchrun started 2 nodes"):
        plan_job(cfg, tmp_path, tmp_path, environ=TORCHRUN_ENV)


def test_env_plan_errors(compose, tmp_path):
    cfg = compose("cluster.mode=env", "cluster.num_nodes=2")
    with pytest.raises(ConfigError, match="neither torchrun"):
        plan_job(cfg, tmp_path, tmp_path, environ={})
    with pytest.raises(ConfigError, match="nproc_per_node=1"):
        plan_job(cfg, tmp_path, tmp_path, environ={**TORCHRUN_ENV, "LOCAL_WORLD_SIZE": "2"})
    with pytest.raises(ConfigError, match="SLURM set one"):
        plan_job(cfg, tmp_path, tmp_path, environ={"SLURM_NODEID": "0", "SLURM_NNODES": "2"})


def _ip_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ip_config.txt"
    path.write_text(text)
    return path


def test_ssh_plan_commands(compose, tmp_path):
    ipc = _ip_config(tmp_path, "# hosts\nnode-a 29600\n\nnode-b 29600\nnode-c\n")
    cfg = compose(
        "cluster=ssh",
        f"cluster.ip_config={ipc}",
        "cluster.num_nodes=2",
        "loader.num_workers=1",
        "cluster.workdir=/shared/my repo",
        "cluster.python=/opt/venv/bin/python",
        "cluster.allow_remote=true",
    )
    plan = plan_job(cfg, tmp_path / "job", tmp_path, cores=4)
    assert isinstance(plan, SshPlan)
    assert plan.hosts == ("node-a", "node-b")
    assert plan.ports == Ports(ddp=29600, rpc=29601)
    assert [(p.name, p.host) for p in plan.procs] == [
        ("trainer0-0", "node-a"),
        ("sampler0-0-0", "node-a"),
        ("trainer1-0", "node-b"),
        ("sampler1-0-0", "node-b"),
    ]
    p = plan.procs[2]
    probes = math.ceil(cfg.sampler.rpc_timeout_s / 2)  # the heartbeat timeout, 1 s probes
    assert p.cmd[:9] == [
        "ssh", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=1",
        "-o", f"ServerAliveCountMax={probes}", "-tt", "node-b",
    ]  # fmt: skip
    remote = shlex.split(p.cmd[9])
    assert remote[:3] == ["cd", "/shared/my repo", "&&"]
    assert remote[3:5] == ["exec", "env"]
    assert remote[-3:] == ["/opt/venv/bin/python", "-m", "app.launch.worker"]
    assigns = dict(a.split("=", 1) for a in remote[5:-3])
    assert Runtime.from_env(assigns) == p.runtime
    assert assigns["DISTGNN_MASTER_ADDR"] == "node-a"
    assert assigns["OMP_NUM_THREADS"] == "2"


def test_ssh_plan_errors(compose, tmp_path):
    ipc = _ip_config(tmp_path, "node-a\n")
    cfg = compose("cluster=ssh", f"cluster.ip_config={ipc}", "cluster.num_nodes=2")
    with pytest.raises(ConfigError, match="lists 1 hosts but cluster.num_nodes=2"):
        plan_job(cfg, tmp_path, tmp_path)
    cfg = compose(
        "cluster=ssh",
        f"cluster.ip_config={ipc}",
        "cluster.num_nodes=1",
        "cluster.allow_remote=true",
    )
    with pytest.raises(ConfigError, match="no port on the first"):
        plan_job(cfg, tmp_path, tmp_path)
    with pytest.raises(ConfigError, match="expected `host \\[port\\]`"):
        read_ip_config(_ip_config(tmp_path, "node-a x\n"), 1)
    with pytest.raises(ConfigError, match="file not found"):
        read_ip_config(tmp_path / "missing.txt", 1)
