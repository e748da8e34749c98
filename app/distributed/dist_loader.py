"""PyG's `torch_geometric.distributed.dist_loader`: `DistLoader` (ours)."""

from app.distributed.loader import DistLoader

__all__ = ["DistLoader"]
