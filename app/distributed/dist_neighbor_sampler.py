"""PyG's `torch_geometric.distributed.dist_neighbor_sampler`: `DistNeighborSampler` (ours:
synchronous `sample_from_nodes` / `sample_edges`, used through the loaders)."""

from app.distributed.sampler import DistNeighborSampler

__all__ = ["DistNeighborSampler"]
