"""Held-out edges for link prediction, split BEFORE any message passing or partitioning.

Held-out edges must not carry messages. `link_split(data, seed)` picks the predicted edge type
(the graph's own edges, or `HETERO_LINK_TYPE` on ogbn-mag-shaped graphs), splits it by unordered
pair (5 % val, 5 % test) and returns the message graph without the held-out edges nor their
reverses. One process trains on that graph directly; a distributed job partitions it
(`app.partition.link.ensure_link_partition`).
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

EdgeType = tuple[str, str, str]
# Link type predicted on heterogeneous (ogbn-mag-shaped) graphs; its val/test links are removed
# from it and from its reverse `rev_has_topic`, so neither direction passes messages.
HETERO_LINK_TYPE: EdgeType = ("paper", "has_topic", "field_of_study")
SPLIT_VERSION = 2  # 2: split by unordered pair (a held-out edge's reverse is held out too)


def split_edges(
    edge_index: Tensor, seed: int, val_frac: float = 0.05, test_frac: float = 0.05
) -> dict[str, Tensor]:
    """Random train / val / test split by unordered node pair (message passing uses train only).

    An edge and its reverse always fall in the same split, so on a symmetric graph a held-out
    edge cannot leak through its reverse; val/test keep one direction per pair.
    """
    src, dst = edge_index
    n = int(edge_index.max()) + 1 if edge_index.numel() else 1
    pair = torch.minimum(src, dst) * n + torch.maximum(src, dst)
    pairs, pair_of_edge = torch.unique(pair, return_inverse=True)
    perm = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed))
    n_val, n_test = int(len(pairs) * val_frac), int(len(pairs) * test_frac)
    split_of_pair = torch.zeros(len(pairs), dtype=torch.long)
    split_of_pair[perm[:n_val]] = 1
    split_of_pair[perm[n_val : n_val + n_test]] = 2
    first_edge = torch.full((len(pairs),), edge_index.size(1), dtype=torch.long)
    first_edge.scatter_reduce_(0, pair_of_edge, torch.arange(edge_index.size(1)), "amin")
    return {
        "val": edge_index[:, first_edge[perm[:n_val]]],
        "test": edge_index[:, first_edge[perm[n_val : n_val + n_test]]],
        "train": edge_index[:, split_of_pair[pair_of_edge] == 0],
    }


def reverse_type(data: HeteroData, edge_type: EdgeType) -> EdgeType | None:
    """The `(dst, rev_rel, src)` edge type `ToUndirected` adds for `edge_type`, if present."""
    src, rel, dst = edge_type
    rev = (dst, f"rev_{rel}", src)
    return rev if rev in data.edge_types else None


def split_hetero_edges(data: HeteroData, edge_type: EdgeType, seed: int) -> dict[str, Tensor]:
    """`split_edges` on one bipartite edge type (destination ids offset so pairs stay distinct)."""
    if edge_type not in data.edge_types:
        raise ValueError(f"link edge type {edge_type} is not in the dataset's {data.edge_types}")
    shift = data[edge_type[0]].num_nodes
    ei = data[edge_type].edge_index
    splits = split_edges(torch.stack([ei[0], ei[1] + shift]), seed)
    return {k: torch.stack([v[0], v[1] - shift]) for k, v in splits.items()}


def _drop_pairs(edge_index: Tensor, held_out: Tensor, num_dst: int) -> Tensor:
    """The edges of `edge_index` whose (src, dst) pair is not a column of `held_out`."""
    keys = edge_index[0] * num_dst + edge_index[1]
    return edge_index[:, ~torch.isin(keys, held_out[0] * num_dst + held_out[1])]


def message_graph(data: HeteroData, edge_type: EdgeType, splits: dict[str, Tensor]) -> HeteroData:
    """Shallow copy of `data` without the val/test links of `edge_type` nor their reverses."""
    held = torch.cat([splits["val"], splits["test"]], dim=1)
    graph = copy.copy(data)  # new stores sharing tensors; `data` keeps its edges
    graph[edge_type].edge_index = _drop_pairs(
        data[edge_type].edge_index, held, data[edge_type[-1]].num_nodes
    )
    rev = reverse_type(data, edge_type)
    if rev is not None:
        graph[rev].edge_index = _drop_pairs(
            data[rev].edge_index, held.flip(0), data[rev[-1]].num_nodes
        )
    return graph


def link_type(data: Data | HeteroData) -> EdgeType | None:
    """The predicted edge type: None (the graph's own edges) or `HETERO_LINK_TYPE`."""
    return HETERO_LINK_TYPE if isinstance(data, HeteroData) else None


def link_split(data: Data | HeteroData, seed: int) -> tuple[Data | HeteroData, dict[str, Tensor]]:
    """(message graph, {train, val, test: [2, E] positives}) of the predicted edge type."""
    if isinstance(data, HeteroData):
        splits = split_hetero_edges(data, HETERO_LINK_TYPE, seed)
        return message_graph(data, HETERO_LINK_TYPE, splits), splits
    splits = split_edges(data.edge_index, seed)
    node_attrs = {k: v for k, v in data.items() if k != "edge_index" and data.is_node_attr(k)}
    graph = Data(edge_index=splits["train"], num_nodes=data.num_nodes, **node_attrs)
    return graph, splits
