"""PyG's `torch_geometric.distributed.partition`: `Partitioner`, `load_partition_info` (ours,
in `app.partition.pyg`: the writer is METIS via pymetis, the layout PyG's plus checksums)."""

from app.partition.pyg import Partitioner, load_partition_info

__all__ = ["Partitioner", "load_partition_info"]
