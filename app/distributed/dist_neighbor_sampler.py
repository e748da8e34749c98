"""PyG's `torch_geometric.distributed.dist_neighbor_sampler`: `DistNeighborSampler` (ours,
`app.distributed.pyg.sampler`)."""

from app.distributed.pyg.sampler import DistNeighborSampler

__all__ = ["DistNeighborSampler"]
