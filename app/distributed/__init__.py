"""Distributed sampling runtime: partition stores, RPC, the distributed sampler and loaders.

PyG's `torch_geometric.distributed` names and arguments, reimplemented to be fast (one batched
RPC per remote partition per hop, local sampling overlapping remote calls, memory-mapped
partitions) and to never hang (every wait bounded; failures name the peer). A PyG script
changes one line: `import app.distributed as pyg_dist` (or `from app.distributed import ...`).

Two faces over one engine: `engine.BatchEngine` (with `inputs`, `feeding` and
`app.loader.epochs.EpochBatching`) is what the trainer builds from typed records after joining
RPC (`group.join_trainer`); `pyg` is PyG's surface, translating PyG's keywords into those
records (docs/design/engine.md).
"""

from app.distributed.context import DistContext, DistRole
from app.distributed.feature_store import LocalFeatureStore
from app.distributed.graph_store import LocalGraphStore
from app.distributed.pyg.loader import DistLinkNeighborLoader, DistLoader, DistNeighborLoader
from app.distributed.pyg.sampler import DistNeighborSampler
from app.distributed.rpc import PeerError, RpcInitError, RPCRouter, init_rpc, shutdown_rpc
from app.distributed.workers import serve, shutdown
from app.partition.pyg import Partitioner, load_partition_info

__all__ = [
    "DistContext",
    "DistRole",
    "DistLinkNeighborLoader",
    "DistLoader",
    "DistNeighborLoader",
    "DistNeighborSampler",
    "LocalFeatureStore",
    "LocalGraphStore",
    "Partitioner",
    "PeerError",
    "RPCRouter",
    "RpcInitError",
    "init_rpc",
    "load_partition_info",
    "serve",
    "shutdown",
    "shutdown_rpc",
]
