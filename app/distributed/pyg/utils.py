"""PyG's `torch_geometric.distributed.utils` helpers that user code and PyG's tests import.

`remove_duplicates` is PyG's contract (first occurrence wins, order kept); `as_str` and
`reverse_edge_type` are PyG's edge-type helpers. PyG's sampler bookkeeping classes
(`NodeDict`, `BatchDict`, `filter_dist_store`) are internals of its sampler and not provided.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor


@dataclass
class DistEdgeHeteroSamplerInput:
    """PyG's seeds of a heterogeneous link batch whose edge joins two node types."""

    input_id: Tensor | None
    node_dict: dict[str, Tensor]
    time_dict: dict[str, Tensor] | None = None
    input_type: Any = None


def remove_duplicates(
    out: Any, node: Tensor, batch: Tensor | None = None, disjoint: bool = False
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """(new sources, all nodes, their batches when `disjoint`) after adding `out.node` to
    `node`: each node (per subgraph when `disjoint`) kept at its first occurrence, in order."""
    num_nodes = node.numel()
    nodes = torch.cat([node, out.node])
    if not disjoint:
        _, first = np.unique(nodes.cpu().numpy(), return_index=True)
        keep = torch.from_numpy(np.sort(first)).to(node.device)
        node = nodes[keep]
        return node[num_nodes:], node, None, None
    if batch is None or out.batch is None:
        raise ValueError("remove_duplicates(disjoint=True) needs `batch` and `out.batch`")
    batches = torch.cat([batch, out.batch])
    pairs = torch.stack([batches, nodes]).cpu().numpy()
    _, first = np.unique(pairs, axis=1, return_index=True)
    keep = torch.from_numpy(np.sort(first)).to(node.device)
    batch, node = batches[keep], nodes[keep]
    return node[num_nodes:], node, batch[num_nodes:], batch


def as_str(inputs: Any) -> str:
    """A node type as itself, an edge type as 'src__rel__dst', anything else as ''."""
    if isinstance(inputs, str):
        return inputs
    if isinstance(inputs, list | tuple) and len(inputs) == 3:
        return "__".join(inputs)
    return ""


def reverse_edge_type(etype: tuple[str, str, str]) -> tuple[str, str, str]:
    """(dst, rev_rel, src): the edge type of the reversed edges (PyG's `rev_` convention)."""
    src, rel, dst = etype
    if src != dst:
        rel = rel.split("_", 1)[1] if rel.split("_", 1)[0] == "rev" else f"rev_{rel}"
    return dst, rel, src
