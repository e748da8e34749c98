"""PyG's `torch_geometric.distributed.local_graph_store`: `LocalGraphStore` (ours)."""

from app.distributed.pyg.graph_store import LocalGraphStore

__all__ = ["LocalGraphStore"]
