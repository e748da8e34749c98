"""Who this process is in a job: role, ranks, addresses and ports, passed by the launcher via env.

The launcher assigns every rank and port once (`app.launch.plan`) and exports them as
`DISTGNN_*` variables; children read them back with `Runtime.from_env()`. Nothing below the
launcher derives ports (no `MASTER_PORT + 1`).

RPC layout (the same on every machine, so any process can name any other without asking):
each cluster node hosts `procs_per_node` trainers followed by `procs_per_node * num_workers`
samplers; `rpc_rank = node_rank * procs_per_node * (1 + num_workers) + slot`.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields

ROLES = ("trainer", "sampler")
ENV_PREFIX = "DISTGNN_"


@dataclass(frozen=True)
class Runtime:
    role: str  # "trainer" | "sampler"
    node_rank: int  # cluster node = partition id
    num_nodes: int
    local_rank: int  # trainer index on its node (a sampler: the trainer it serves)
    procs_per_node: int
    worker_index: int  # sampler index within its trainer; -1 for trainers
    num_workers: int  # samplers per trainer
    master_addr: str
    ddp_port: int  # trainers' process group (gloo / nccl)
    rpc_port: int  # RPC group of every trainer and sampler
    job_dir: str  # this job's output dir: config.yaml, logs/, checkpoints/
    config_path: str  # composed config written by the launcher
    partition_root: str  # partition folder every process loads its part from

    @property
    def rank(self) -> int:
        """Global trainer rank (DDP rank); for a sampler, the rank of the trainer it serves."""
        return self.node_rank * self.procs_per_node + self.local_rank

    @property
    def world_size(self) -> int:
        """Number of trainers in the job (DDP world size)."""
        return self.num_nodes * self.procs_per_node

    @property
    def procs_per_node_total(self) -> int:
        return self.procs_per_node * (1 + self.num_workers)

    @property
    def rpc_world_size(self) -> int:
        return self.num_nodes * self.procs_per_node_total

    @property
    def rpc_rank(self) -> int:
        slot = self.local_rank
        if self.role == "sampler":
            slot = self.procs_per_node + self.local_rank * self.num_workers + self.worker_index
        return self.node_rank * self.procs_per_node_total + slot

    @property
    def name(self) -> str:
        return worker_name(self.role, self.node_rank, self.local_rank, self.worker_index)

    def to_env(self) -> dict[str, str]:
        return {ENV_PREFIX + k.upper(): str(v) for k, v in asdict(self).items()}

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Runtime:
        env = os.environ if env is None else env
        values = {}
        for f in fields(cls):
            key = ENV_PREFIX + f.name.upper()
            if key not in env:
                raise RuntimeError(
                    f"{key} is not set: this entry point is started by the distgnn launcher "
                    "(python -m app ...), not directly"
                )
            values[f.name] = int(env[key]) if f.type == "int" else env[key]
        return cls(**values)


def worker_name(role: str, node_rank: int, local_rank: int, worker_index: int = -1) -> str:
    """RPC name of a process: `trainer<node>-<local>` or `sampler<node>-<local>-<w>` (RPC names allow no dots)."""
    if role == "trainer":
        return f"trainer{node_rank}-{local_rank}"
    return f"sampler{node_rank}-{local_rank}-{worker_index}"


def node_workers(node_rank: int, procs_per_node: int, num_workers: int) -> list[str]:
    """RPC names of every process on a node: each holds that node's partition."""
    names = [worker_name("trainer", node_rank, t) for t in range(procs_per_node)]
    names += [
        worker_name("sampler", node_rank, t, w)
        for t in range(procs_per_node)
        for w in range(num_workers)
    ]
    return names


# -- per-process CPU settings -----------------------------------------------------------------

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # glibc mallopt parameters
_ARENAS = 2  # malloc arenas shared by a process's threads
_MMAP_MAX = 32 << 20  # glibc's ceiling for M_MMAP_THRESHOLD on 64-bit


def tune_process(role: str) -> dict[str, int]:
    """Thread counts and allocator settings for a `role` process; returns what was set.

    A node runs T trainers and T*W sampler processes; the launcher splits the cores available
    to the job between them (`app.threads`; OMP_NUM_THREADS / MKL_NUM_THREADS per child). A trainer computes with torch, so its
    intra-op pool takes that share (`OMP_NUM_THREADS`, default 1). A sampler's work is the numba
    kernels (single-threaded, they release the GIL), numpy gathers and RPC handler threads: one
    torch thread and one numba thread, so W samplers never oversubscribe the cores the trainer
    uses. Both roles keep freed heap memory (no trim, blocks up to 32 MB from the heap) instead
    of returning it to the kernel after every batch: a batch's tens of MB of temporaries (a
    sampler's gathers, a trainer's activations, an evaluation chunk's) then reuse pages already
    faulted in rather than faulting in fresh ones; and their threads (a sampler's RPC handlers:
    a dozen or more) share two malloc arenas: with one arena per thread, as glibc gives by
    default, each kept its own high-water mark (products: 150 MB more per sampler).
    """
    from app.threads import set_threads

    threads = 1 if role == "sampler" else max(1, int(os.environ.get("OMP_NUM_THREADS", "1")))
    out = set_threads(threads)
    out["malloc_tuned"] = int(_keep_heap())
    return out


def _keep_heap() -> bool:
    """glibc: never trim the heap, serve blocks up to 32 MB from it, two arenas for all threads
    (False if not glibc)."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(
            libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)
            and libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_MAX)
            and libc.mallopt(_M_ARENA_MAX, _ARENAS)
        )
    except (OSError, AttributeError):
        return False
