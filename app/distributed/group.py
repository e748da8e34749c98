"""Joining the job's RPC group as a trainer: one explicit step, before any loader is built.

`train_distributed` calls `join_trainer` after the process group and before the task, so the
engine's loaders (`BatchEngine`) find a joined group; only the PyG layer
(`app.distributed.pyg`) joins on a loader's construction, as PyG's hand-launched scripts expect.
"""

from __future__ import annotations

from app.distributed import rpc, server
from app.distributed.context import DistContext
from app.distributed.feature_store import FeatureStoreCore
from app.distributed.graph_store import GraphStoreCore

DEFAULT_RPC_THREADS = 32  # RPC handler threads of a process (PyG's num_rpc_threads=None)
Stores = tuple[FeatureStoreCore, GraphStoreCore]


def trainer_router(ctx: DistContext, num_partitions: int) -> rpc.RPCRouter | None:
    """Who serves each partition to this trainer's samplers (None: one partition, no peers)."""
    return rpc.RPCRouter.for_context(ctx) if num_partitions > 1 else None


def join_trainer(
    ctx: DistContext,
    stores: Stores,
    router: rpc.RPCRouter | None,
    address: tuple[str, int],
    timeouts: tuple[float, float],
    num_rpc_threads: int = DEFAULT_RPC_THREADS,
) -> None:
    """Join as the trainer `ctx` names at the group's master `address` (host, port), within
    `timeouts` = (per call, for the master): a trainer that samples itself
    (`ctx.num_workers == 0`) first registers its stores, so it serves its partition to peers
    from its first moment in the group. Idempotent within a process."""
    if ctx.num_workers == 0:
        server.register(*stores, router)
    rpc_timeout, init_timeout = timeouts
    rpc.init_rpc(
        ctx,
        address[0],
        int(address[1]),
        num_rpc_threads,
        timeout_s=rpc_timeout,
        init_timeout_s=init_timeout,
    )
