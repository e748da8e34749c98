"""PyG's `torch_geometric.distributed.dist_neighbor_loader`: `DistNeighborLoader` (ours)."""

from app.distributed.pyg.loader import DistNeighborLoader

__all__ = ["DistNeighborLoader"]
