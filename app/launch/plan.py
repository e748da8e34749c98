"""Process plans: which processes a distributed job runs, where, with which identity and ports.

A plan is decided once, in the launcher process, before anything starts. Every child gets its
whole identity (`Runtime`: role, ranks, master address, DDP and RPC ports, paths) through env;
nothing downstream derives ports. The deployment mode is a type, not a flag:

- `LocalPlan` (cluster.mode=local): every cluster node is a group of processes on 127.0.0.1.
  Ports are free ones found by binding to port 0, or `ddp = master_port, rpc = master_port + 1`
  when `cluster.master_port` is set.
- `EnvPlan` (cluster.mode=env): this process was started on each machine by torchrun or srun;
  it runs only its own machine's share (trainers + samplers of one node). Node rank, node count
  and master address come from the environment (torchrun: GROUP_RANK / GROUP_WORLD_SIZE /
  MASTER_ADDR / MASTER_PORT; SLURM: SLURM_NODEID / SLURM_NNODES / SLURM_LAUNCH_NODE_IPADDR).
  torchrun's own rendezvous store listens on MASTER_PORT, so `ddp = MASTER_PORT + 1` and
  `rpc = MASTER_PORT + 2` (SLURM: MASTER_PORT if exported, else cluster.master_port, is the base).
- `SshPlan` (cluster.mode=ssh): like PyG's launch.py, one line `host [port]` per node in
  `cluster.ip_config`; node i runs on line i's host through `ssh host 'cd workdir && env ...
  python -m app.launch.worker'`. The master is line 0's host; its port (or cluster.master_port)
  gives `ddp = port, rpc = port + 1`. Paths must be valid on every host (shared file system).
"""

from __future__ import annotations

import math
import os
import random
import shlex
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from app.config import ClusterConfig, Config, ConfigError, check_remote, heartbeat_timeout_s
from app.contract import CONFIG_FILE
from app.launch.heartbeat import heartbeat_env
from app.netutil import loopback_ifname_env
from app.runtime import Runtime
from app.threads import available_cores

WORKER_MODULE = "app.launch.worker"
# Each role's main, `(Runtime, Config) -> exit code`, named as a string (`app.entrypoint`): the
# worker resolves it, so the launcher imports nothing from the rooms above it.
ROLE_MAINS = {
    "trainer": "app.train.distributed:trainer_main",
    "sampler": "app.distributed.workers:serve",
}
LOCALHOST = "127.0.0.1"


@dataclass(frozen=True)
class Ports:
    """The job's two listening ports, both on the master address."""

    ddp: int  # trainers' process group rendezvous (TCP store)
    rpc: int  # RPC group of every trainer and sampler

    def __post_init__(self) -> None:
        for name, port in (("ddp", self.ddp), ("rpc", self.rpc)):
            if not 0 < port < 65536:
                raise ConfigError(f"{name} port {port} out of range: set cluster.master_port")
        if self.ddp == self.rpc:
            raise ConfigError(f"ddp and rpc ports are both {self.ddp}: they must differ")


@dataclass(frozen=True)
class ProcSpec:
    """One child process: its name, where it runs, the command and its full environment."""

    name: str
    role: str
    node_rank: int
    host: str
    cmd: list[str]
    env: dict[str, str]
    runtime: Runtime
    via_ssh: bool = False  # cmd is an ssh client running the process on `host`


@dataclass(frozen=True)
class LocalPlan:
    """Every node of the job as processes on this machine."""

    procs: tuple[ProcSpec, ...]
    ports: Ports


@dataclass(frozen=True)
class EnvPlan:
    """This machine's share of a job started on every machine by torchrun / srun."""

    procs: tuple[ProcSpec, ...]
    ports: Ports
    node_rank: int
    source: str  # which launcher's variables were read: "torchrun" | "slurm"


@dataclass(frozen=True)
class SshPlan:
    """Every node started over ssh from this machine (the first host is the master)."""

    procs: tuple[ProcSpec, ...]
    ports: Ports
    hosts: tuple[str, ...]


ProcessPlan = LocalPlan | EnvPlan | SshPlan


@dataclass(frozen=True)
class EnvCluster:
    """What torchrun / SLURM tells this machine about the cluster."""

    node_rank: int
    num_nodes: int
    master_addr: str
    base_port: int  # MASTER_PORT (torchrun's store); ddp/rpc are the two ports above it
    source: str


def _ephemeral_low() -> int:
    """Lower bound of the OS's ephemeral port range (outgoing connections take those ports)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((LOCALHOST, port))
            return True
        except OSError:
            return False


def free_ports(n: int, rng: random.Random | None = None) -> list[int]:
    """`n` distinct ports free right now, below the ephemeral range.

    Ports handed out by binding to port 0 come from the ephemeral range, which every outgoing
    connection on the machine also draws from, so on a busy host one may be taken in the
    seconds before the children bind it. Ports in [10000, ephemeral low) are not handed out
    implicitly; a random pick there that binds now stays free in practice.
    """
    rng = rng or random.Random()
    low, high = 10000, max(_ephemeral_low() - 1, 10000 + 10 * n)
    found: list[int] = []
    for _ in range(1000):
        port = rng.randint(low, high)
        if port not in found and _bindable(port):
            found.append(port)
            if len(found) == n:
                return found
    raise RuntimeError(f"no {n} free ports in [{low}, {high}]: set cluster.master_port")


def _int_env(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise ConfigError(f"{key}={env[key]!r} is not an integer") from None


def read_env_cluster(c: ClusterConfig, env: Mapping[str, str]) -> EnvCluster:
    """torchrun's or SLURM's view of the cluster, checked against `cluster.num_nodes`."""
    ec = _env_cluster(c, env)
    n = c.num_nodes
    if ec.num_nodes != n:
        raise ConfigError(
            f"cluster.num_nodes={n} but {ec.source} started {ec.num_nodes} nodes: "
            f"set cluster.num_nodes={ec.num_nodes} or start {n} nodes"
        )
    if not 0 <= ec.node_rank < n:
        raise ConfigError(f"node rank {ec.node_rank} from {ec.source} not in [0, {n})")
    check_remote(ec.master_addr, f"MASTER_ADDR from {ec.source}", c)
    return ec


def _env_cluster(c: ClusterConfig, env: Mapping[str, str]) -> EnvCluster:
    """Node rank, node count, master address and base port from torchrun's or SLURM's env."""
    if any(k in env for k in ("GROUP_RANK", "NODE_RANK", "RANK")):
        if env.get("LOCAL_WORLD_SIZE", "1") != "1":
            raise ConfigError(
                f"LOCAL_WORLD_SIZE={env['LOCAL_WORLD_SIZE']}: start torchrun with "
                "--nproc_per_node=1 (trainers per node are cluster.procs_per_node)"
            )
        rank_key = next(k for k in ("GROUP_RANK", "NODE_RANK", "RANK") if k in env)
        size_key = "GROUP_WORLD_SIZE" if "GROUP_WORLD_SIZE" in env else "WORLD_SIZE"
        missing = [k for k in (size_key, "MASTER_ADDR", "MASTER_PORT") if k not in env]
        if missing:
            raise ConfigError(f"cluster.mode=env: {', '.join(missing)} not set by the launcher")
        return EnvCluster(
            node_rank=_int_env(env, rank_key),
            num_nodes=_int_env(env, size_key),
            master_addr=env["MASTER_ADDR"],
            base_port=_int_env(env, "MASTER_PORT"),
            source="torchrun",
        )
    if "SLURM_NODEID" in env:
        base = _int_env(env, "MASTER_PORT") if "MASTER_PORT" in env else c.master_port
        if base <= 0:
            raise ConfigError(
                "cluster.master_port=0 and MASTER_PORT unset: under SLURM set one "
                "(ddp/rpc use base+1/base+2)"
            )
        return EnvCluster(
            node_rank=_int_env(env, "SLURM_NODEID"),
            num_nodes=_int_env(env, "SLURM_NNODES"),
            master_addr=env.get("MASTER_ADDR") or env["SLURM_LAUNCH_NODE_IPADDR"],
            base_port=base,
            source="slurm",
        )
    raise ConfigError(
        "cluster.mode=env but neither torchrun (GROUP_RANK/RANK) nor SLURM "
        "(SLURM_NODEID) variables are set: start with torchrun/srun, or use cluster.mode=local"
    )


def read_ip_config(path: str | os.PathLike, num_nodes: int) -> list[tuple[str, int | None]]:
    """The first `num_nodes` `host [port]` lines of an ip_config file (blank/# lines skipped)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"cluster.ip_config={str(path)!r}: file not found")
    rows: list[tuple[str, int | None]] = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        if len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
            raise ConfigError(f"{p}:{n}: {line.strip()!r}: expected `host [port]`")
        rows.append((parts[0], int(parts[1]) if len(parts) == 2 else None))
    if len(rows) < num_nodes:
        raise ConfigError(
            f"cluster.ip_config={str(path)!r} lists {len(rows)} hosts but "
            f"cluster.num_nodes={num_nodes}: add one `host [port]` line per node"
        )
    return rows[:num_nodes]


def plan_ports(c: ClusterConfig, env: Mapping[str, str]) -> Ports:
    """Decide the job's ports once, by mode (see the module docstring)."""
    mode = c.mode
    if mode == "env":
        base = read_env_cluster(c, env).base_port
        return Ports(ddp=base + 1, rpc=base + 2)
    if mode == "ssh":
        rows = read_ip_config(c.ip_config or "", c.num_nodes)
        for host, _ in rows:
            check_remote(host, f"host {host!r} in cluster.ip_config", c)
        port = rows[0][1]
        base = c.master_port or port
        if not base:
            raise ConfigError(
                "ssh mode: no port on the first cluster.ip_config line and cluster.master_port=0"
            )
        return Ports(ddp=base, rpc=base + 1)
    if c.master_port:
        return Ports(ddp=c.master_port, rpc=c.master_port + 1)
    ddp, rpc = free_ports(2)
    return Ports(ddp=ddp, rpc=rpc)


def node_runtimes(
    c: ClusterConfig,
    num_workers: int,
    node_rank: int,
    master_addr: str,
    ports: Ports,
    paths: dict[str, str],
) -> list[Runtime]:
    """Identities of one node's processes: its trainers, then `num_workers` samplers each."""
    common = dict(
        node_rank=node_rank,
        num_nodes=c.num_nodes,
        procs_per_node=c.procs_per_node,
        num_workers=num_workers,
        master_addr=master_addr,
        ddp_port=ports.ddp,
        rpc_port=ports.rpc,
        **paths,
    )
    out = [
        Runtime(role="trainer", local_rank=t, worker_index=-1, **common)
        for t in range(c.procs_per_node)
    ]
    out += [
        Runtime(role="sampler", local_rank=t, worker_index=w, **common)
        for t in range(c.procs_per_node)
        for w in range(num_workers)
    ]
    return out


def heartbeat_path(job_dir: str, name: str) -> Path:
    """Where a child beats (`app.launch.heartbeat`): under the job dir, one file per child."""
    return Path(job_dir) / "heartbeats" / name


def child_env(runtime: Runtime, threads: int, extra: Mapping[str, str]) -> dict[str, str]:
    """The variables a child needs on top of the inherited environment.

    Fresh memory faults in 2 MB at a time instead of 4 kB where the kernel allows transparent
    huge pages: torch backs each CPU tensor of 2 MB or more with them (`THP_MEM_ALLOC_ENABLE=1`)
    and glibc its heap (`glibc.malloc.hugetlb=1`), unless the launcher's environment sets
    either. A trainer's first epoch then faults less than half as often, in the same time.
    """
    n = str(max(1, threads))
    return {
        "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE", "1"),
        "GLIBC_TUNABLES": huge_heap_tunables(os.environ.get("GLIBC_TUNABLES", "")),
        **loopback_ifname_env(runtime.master_addr),  # gloo / TensorPipe data sockets on lo
        **extra,
        **runtime.to_env(),
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": n,
        "MKL_NUM_THREADS": n,
    }


def huge_heap_tunables(tunables: str) -> str:
    """`tunables` (GLIBC_TUNABLES syntax, `name=value:...`) plus `glibc.malloc.hugetlb=1`."""
    if "glibc.malloc.hugetlb=" in tunables:
        return tunables
    return ":".join(t for t in (tunables, "glibc.malloc.hugetlb=1") if t)


def ssh_command(
    c: ClusterConfig, host: str, env: dict[str, str], workdir: str, silence_s: float
) -> list[str]:
    """`ssh host 'cd workdir && env K=V ... exec python -m app.launch.worker'`.

    `-tt` gives the remote command a terminal, so closing the ssh client (the launcher killing
    it) hangs up the remote worker too; BatchMode fails fast instead of asking for a password.
    The client probes the host every `cluster.heartbeat_s` and gives up after `silence_s`
    (the heartbeat timeout) of silence ("Timeout, server HOST not responding"): a host cut off
    fails the job like a silent child, named.
    """
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    remote = (
        f"cd {shlex.quote(workdir)} && exec env {assigns} "
        f"{shlex.quote(c.python)} -m {WORKER_MODULE}"
    )
    every = max(1, round(c.heartbeat_s))
    probes = max(2, math.ceil(silence_s / every))
    alive = ["-o", f"ServerAliveInterval={every}", "-o", f"ServerAliveCountMax={probes}"]
    return [*shlex.split(c.ssh_cmd), "-o", "BatchMode=yes", *alive, "-tt", host, remote]


def _specs(
    cfg: Config,
    nodes: list[tuple[int, str]],
    ports: Ports,
    paths: dict[str, str],
    threads: int,
    python: str,
    master_addr: str,
    extra_env: Mapping[str, str],
    workdir: str | None = None,
) -> tuple[ProcSpec, ...]:
    """ProcSpecs for the given (node_rank, host) pairs; `workdir` set means run over ssh.

    Reads three sections: `cluster`, `loader.num_workers` (samplers per trainer) and the
    heartbeat timeout (`sampler.rpc_timeout_s` when `cluster.heartbeat_timeout_s` is 0).
    """
    c, out = cfg.cluster, []
    for node_rank, host in nodes:
        for rt in node_runtimes(c, cfg.loader.num_workers, node_rank, master_addr, ports, paths):
            beat = heartbeat_env(heartbeat_path(rt.job_dir, rt.name), c.heartbeat_s)
            env = child_env(rt, threads, {**extra_env, **beat})
            cmd = [python, "-m", WORKER_MODULE]
            if workdir is not None:
                cmd = ssh_command(c, host, env, workdir, heartbeat_timeout_s(cfg))
            out.append(
                ProcSpec(rt.name, rt.role, node_rank, host, cmd, env, rt, workdir is not None)
            )
    return tuple(out)


def plan_job(
    cfg: Config,
    job_dir: str | os.PathLike,
    partition_root: str | os.PathLike,
    ports: Ports | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cores: int | None = None,
    python: str = sys.executable,
    extra_env: Mapping[str, str] | None = None,
) -> ProcessPlan:
    """Build the job's process plan for `cfg.cluster.mode` (pure when `ports` is given).

    Args:
        job_dir: the job's output dir (config.yaml, logs/, checkpoints/, result.json).
        partition_root: the partition folder every process loads its part from.
        ports: decided ports; None decides them now (`plan_ports`).
        environ: where env mode reads torchrun/SLURM variables (default: os.environ).
        cores: CPU cores per machine, shared by the processes on it for OMP/MKL threads
            (default: `app.threads.available_cores`, this machine's less its load).
        python: interpreter of local children (ssh children use cluster.python).
        extra_env: more variables for every child (e.g. the MLflow parent run id).
    """
    env = os.environ if environ is None else environ
    ports = ports or plan_ports(cfg.cluster, env)
    cores = cores or available_cores()
    job_dir = Path(job_dir).resolve()
    paths = {
        "job_dir": str(job_dir),
        "config_path": str(job_dir / CONFIG_FILE),
        "partition_root": str(Path(partition_root).resolve()),
    }
    extra = dict(extra_env or {})
    per_node = cfg.cluster.procs_per_node * (1 + cfg.loader.num_workers)
    n = cfg.cluster.num_nodes
    fixed = cfg.cluster.threads_per_proc
    if cfg.cluster.mode == "env":
        ec = read_env_cluster(cfg.cluster, env)
        nodes = [(ec.node_rank, socket.gethostname())]
        threads = fixed or cores // per_node
        procs = _specs(cfg, nodes, ports, paths, threads, python, ec.master_addr, extra)
        return EnvPlan(procs, ports, ec.node_rank, ec.source)
    if cfg.cluster.mode == "ssh":
        hosts = tuple(h for h, _ in read_ip_config(cfg.cluster.ip_config or "", n))
        workdir = cfg.cluster.workdir or os.getcwd()
        nodes = list(enumerate(hosts))
        procs = _specs(
            cfg,
            nodes,
            ports,
            paths,
            fixed or cores // per_node,
            cfg.cluster.python,
            hosts[0],
            extra,
            workdir,
        )
        return SshPlan(procs, ports, hosts)
    nodes = [(i, LOCALHOST) for i in range(n)]
    threads = fixed or cores // (per_node * n)
    procs = _specs(cfg, nodes, ports, paths, threads, python, LOCALHOST, extra)
    return LocalPlan(procs, ports)
