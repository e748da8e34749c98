"""`DistContext`: who this process is in the RPC group, with PyG's field names.

Two ways in. The launcher's processes build it from their `Runtime` (`from_runtime`), which
names the RPC identity (`trainer0-0`, `sampler1-0-0`, ...). A hand-launched PyG-style script
builds it from PyG's five fields only; the loader then derives the rest (`for_partition`) from
what PyG passes it: the partition its stores hold and `num_workers`. The RPC layout is the
launcher's (`app.runtime`): each node runs `world_size / num_partitions` trainers followed by
their sampler processes, so every process can name every other without asking.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from app.runtime import Runtime


class DistRole(Enum):
    """PyG's role enum; `WORKER` is its only value, kept for API compatibility."""

    WORKER = 1


@dataclass
class DistContext:
    """Context of the current process (PyG's fields, plus the RPC identity we need).

    `rank`/`world_size` count trainers (DDP); `global_rank`/`global_world_size` count every
    process of the RPC group (trainers and samplers). `role` is `trainer` or `sampler`
    (PyG's `DistRole.WORKER` means a trainer). The fields after `role` are derived by the
    loader for a context built from PyG's five fields (`for_partition`); `name` empty means
    "not derived yet".
    """

    rank: int
    global_rank: int
    world_size: int
    global_world_size: int
    group_name: str
    role: str | DistRole = "trainer"
    partition_idx: int = 0
    num_partitions: int = 1
    procs_per_node: int = 1
    num_workers: int = 0
    local_rank: int = 0
    name: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.role, DistRole):
            self.role = "trainer"

    @property
    def worker_name(self) -> str:
        """RPC name of this process."""
        return self.name or f"{self.group_name}-{self.rank}"

    @property
    def is_derived(self) -> bool:
        """Whether the RPC identity is known (launcher contexts, or after `for_partition`)."""
        return bool(self.name)

    def for_partition(
        self, num_partitions: int, partition_idx: int, num_workers: int
    ) -> DistContext:
        """This trainer's full context from PyG's five fields and what its loader knows.

        `rank`/`world_size` count trainers as in PyG's examples (`node_rank * procs + local`);
        the partition comes from the loader's stores. A context that does not fit is refused
        with one line naming the field.
        """
        if self.is_derived:
            return self
        if self.world_size <= 0 or self.world_size % num_partitions:
            raise ValueError(
                f"DistContext.world_size={self.world_size} is not a multiple of the partition "
                f"count {num_partitions}: pass world_size=num_nodes * num_training_procs_per_node"
            )
        if (self.global_rank, self.global_world_size) != (self.rank, self.world_size):
            raise ValueError(
                f"DistContext(global_rank={self.global_rank}, global_world_size="
                f"{self.global_world_size}) differs from (rank={self.rank}, world_size="
                f"{self.world_size}): pass the same values, as PyG's examples do (the RPC ranks of "
                "trainers and sampler processes are derived from them)"
            )
        procs = self.world_size // num_partitions
        if not 0 <= self.rank < self.world_size or self.rank // procs != partition_idx:
            raise ValueError(
                f"DistContext.rank={self.rank} (world_size={self.world_size}) does not belong to "
                f"partition {partition_idx} that this process's stores hold: pass rank="
                f"node_rank * {procs} + local_proc_rank and load partition node_rank"
            )
        runtime = _runtime(
            "trainer", partition_idx, num_partitions, self.rank % procs, procs, -1, num_workers
        )
        return DistContext.from_runtime(runtime, self.group_name)

    def sampler(self, worker_index: int) -> DistContext:
        """Context of this trainer's sampler process `worker_index` (a derived context)."""
        runtime = _runtime(
            "sampler",
            self.partition_idx,
            self.num_partitions,
            self.local_rank,
            self.procs_per_node,
            worker_index,
            self.num_workers,
        )
        return DistContext.from_runtime(runtime, self.group_name)

    @classmethod
    def from_runtime(cls, runtime: Runtime, group_name: str = "distgnn") -> DistContext:
        """Build the context of a launcher-started process from its `Runtime`."""
        return cls(
            rank=runtime.rank,
            global_rank=runtime.rpc_rank,
            world_size=runtime.world_size,
            global_world_size=runtime.rpc_world_size,
            group_name=group_name,
            role=runtime.role,
            partition_idx=runtime.node_rank,
            num_partitions=runtime.num_nodes,
            procs_per_node=runtime.procs_per_node,
            num_workers=runtime.num_workers,
            local_rank=runtime.local_rank,
            name=runtime.name,
        )


def _runtime(
    role: str, node: int, nodes: int, local: int, procs: int, worker: int, workers: int
) -> Runtime:
    """The launcher's layout for one process (addresses unused: only ranks and names)."""
    return Runtime(
        role=role,
        node_rank=node,
        num_nodes=nodes,
        local_rank=local,
        procs_per_node=procs,
        worker_index=worker,
        num_workers=workers,
        master_addr="",
        ddp_port=0,
        rpc_port=0,
        job_dir="",
        config_path="",
        partition_root="",
    )
