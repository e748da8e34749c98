"""PyG's `torch_geometric.distributed.utils` (ours, `app.distributed.pyg.utils`)."""

from app.distributed.pyg.utils import (
    DistEdgeHeteroSamplerInput,
    as_str,
    remove_duplicates,
    reverse_edge_type,
)

__all__ = ["DistEdgeHeteroSamplerInput", "as_str", "remove_duplicates", "reverse_edge_type"]
