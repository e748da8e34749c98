"""`DistContext`: who this process is in the RPC group, with PyG's field names.

PyG's trainers build it by hand from ranks; here it comes from the launcher's `Runtime`, so the
RPC name of every process is the launcher's `worker_name` (`trainer0.0`, `sampler1.0.0`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from app.runtime import Runtime


class DistRole(Enum):
    """PyG's role enum; `WORKER` is its only value, kept for API compatibility."""

    WORKER = 1


@dataclass(frozen=True)
class DistContext:
    """Context of the current process (PyG's fields, plus the RPC identity we need).

    `rank`/`world_size` count trainers (DDP); `global_rank`/`global_world_size` count every
    process of the RPC group (trainers and samplers). `role` is `trainer` or `sampler`.
    """

    rank: int
    global_rank: int
    world_size: int
    global_world_size: int
    group_name: str
    role: str = "trainer"
    partition_idx: int = 0
    num_partitions: int = 1
    procs_per_node: int = 1
    num_workers: int = 0
    local_rank: int = 0
    name: str = ""

    @property
    def worker_name(self) -> str:
        """RPC name of this process."""
        return self.name or f"{self.group_name}-{self.rank}"

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
