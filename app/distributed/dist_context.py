"""PyG's `torch_geometric.distributed.dist_context`: `DistContext` and `DistRole` (ours)."""

from app.distributed.context import DistContext, DistRole

__all__ = ["DistContext", "DistRole"]
