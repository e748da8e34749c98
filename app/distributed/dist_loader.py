"""PyG's `torch_geometric.distributed.dist_loader`: `DistLoader` (ours)."""

from app.distributed.pyg.loader import DistLoader

__all__ = ["DistLoader"]
