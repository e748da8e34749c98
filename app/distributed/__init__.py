"""Distributed sampling runtime: partition stores, RPC, the distributed sampler and loaders.

PyG's `torch_geometric.distributed` names and arguments, reimplemented to be fast (one batched
RPC per remote partition per hop, local sampling overlapping remote calls, memory-mapped
partitions) and to never hang (every wait bounded; failures name the peer). A PyG script
changes one line: `import app.distributed as pyg_dist` (or `from app.distributed import ...`).

Two faces over one engine: `engine.BatchEngine` (with `inputs`, `feeding` and
`app.loader.epochs.EpochBatching`) is what the trainer builds from typed records after joining
RPC (`group.join_trainer`); `pyg` is PyG's surface, translating PyG's keywords into those
records (docs/design/engine.md).

The exports load on first use (`app.entrypoint.lazy_exports`): a sampler process imports
`app.distributed.workers`, which runs this file, and must not pay for the loaders and PyG's
surface it never uses (issue 38: its fixed memory). `server` alone loads with the package, as
before: importing it fills the endpoint table, so any process that imports `app.distributed`
answers its peers' calls (ping, stop, hop, features) once it joins RPC.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# Importing `server` fills the endpoint table: a process importing this package answers peers.
from app.distributed import server as _server  # noqa: F401
from app.entrypoint import lazy_exports, type_checking_exports

if TYPE_CHECKING:  # the exports: their types for mypy and IDEs, and the table below
    from app.distributed.context import DistContext as DistContext
    from app.distributed.context import DistRole as DistRole
    from app.distributed.pyg.feature_store import LocalFeatureStore as LocalFeatureStore
    from app.distributed.pyg.graph_store import LocalGraphStore as LocalGraphStore
    from app.distributed.pyg.loader import DistLinkNeighborLoader as DistLinkNeighborLoader
    from app.distributed.pyg.loader import DistLoader as DistLoader
    from app.distributed.pyg.loader import DistNeighborLoader as DistNeighborLoader
    from app.distributed.pyg.sampler import DistNeighborSampler as DistNeighborSampler
    from app.distributed.rpc import PeerError as PeerError
    from app.distributed.rpc import RpcInitError as RpcInitError
    from app.distributed.rpc import RPCRouter as RPCRouter
    from app.distributed.rpc import init_rpc as init_rpc
    from app.distributed.rpc import shutdown_rpc as shutdown_rpc
    from app.distributed.workers import serve as serve
    from app.distributed.workers import shutdown as shutdown
    from app.partition.pyg import Partitioner as Partitioner
    from app.partition.pyg import load_partition_info as load_partition_info

_EXPORTS = type_checking_exports(__file__)  # the block above, read once
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
