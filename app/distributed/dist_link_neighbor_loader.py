"""PyG's `torch_geometric.distributed.dist_link_neighbor_loader`: `DistLinkNeighborLoader`."""

from app.distributed.pyg.loader import DistLinkNeighborLoader

__all__ = ["DistLinkNeighborLoader"]
