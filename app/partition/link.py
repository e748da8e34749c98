"""Held-out edges for link prediction, split BEFORE any message passing or partitioning.

Held-out edges must not carry messages. `link_split(data, seed)` picks the predicted edge type
(the graph's own edges, or `HETERO_LINK_TYPE` on ogbn-mag-shaped graphs), splits it by unordered
pair (5 % val, 5 % test) and returns the message graph without the held-out edges nor their
reverses. One process trains on that graph directly; a distributed job partitions it
(`ensure_link_partition`, called by the launcher) and stores the held-out edges in
`<root>/link_split.pt`, in the partition's node ids (a relabelled partition's new ids). The
partition's dataset fingerprint carries the split
(`<dataset fp>-link<version>-s<seed>`) and its folder ends in `-link`, so it never clashes with
the node-classification partition of the same dataset.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from app.config import Config
from app.fsutil import torch_save_atomic

log = logging.getLogger("distgnn")

EdgeType = tuple[str, str, str]
LINK_SPLIT_FILE = "link_split.pt"
SPLIT_VERSION = 2  # 2: split by unordered pair (a held-out edge's reverse is held out too)
# Link type predicted on heterogeneous (ogbn-mag-shaped) graphs; its val/test links are removed
# from it and from its reverse `rev_has_topic`, so neither direction passes messages.
HETERO_LINK_TYPE: EdgeType = ("paper", "has_topic", "field_of_study")


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


def link_dataset_fingerprint(cfg: Config) -> str:
    """The dataset fingerprint of the training-edge graph: dataset fingerprint + split seed."""
    from app.dataset import dataset_fingerprint

    return f"{dataset_fingerprint(cfg.dataset, cfg.seed)}-link{SPLIT_VERSION}-s{cfg.seed}"


def link_partition_root(cfg: Config) -> tuple[Path, str, str]:
    """(folder, partition fingerprint, dataset fingerprint) of the link job's partition."""
    from app.partition.task import config_fingerprint, partition_root

    dataset_fp = link_dataset_fingerprint(cfg)
    fp = config_fingerprint(cfg, dataset_fp)
    root = partition_root(cfg, fp)
    return (root if cfg.partition.root else root.with_name(root.name + "-link")), fp, dataset_fp


def ensure_link_partition(cfg: Config) -> Path:
    """Partition of the message graph plus `link_split.pt` (val / test edges, in the partition's
    node ids); reused if present."""
    from app.partition.task import write_partition
    from app.partition.writer import find_existing

    root, fp, dataset_fp = link_partition_root(cfg)
    existing = find_existing(root, fp, cfg.partition.overwrite)
    if existing is not None and (root / LINK_SPLIT_FILE).is_file():
        log.info("reusing link partition %s", root)
        return root
    from app.dataset import load_dataset

    graph, splits = link_split(load_dataset(cfg.dataset, cfg.seed), cfg.seed)
    if existing is None:
        write_partition(cfg, graph, root, dataset_fp)
    edge_type = HETERO_LINK_TYPE if isinstance(graph, HeteroData) else None
    held_out = {k: partition_ids(root, splits[k], edge_type).contiguous() for k in ("val", "test")}
    torch_save_atomic(held_out, root / LINK_SPLIT_FILE)
    return root


def partition_ids(root: Path, edges: Tensor, edge_type: EdgeType | None) -> Tensor:
    """`edges` [2, E] (original node ids; of `edge_type` on a heterogeneous graph) in the node ids
    of the partition at `root`: a relabelled partition numbered every node anew (`new_id`)."""
    from app.partition.reader import load_maps, read_meta

    meta = read_meta(root)
    if not meta.get("relabel"):
        return edges
    new_id = load_maps(root, meta, "new_id")
    new_src, new_dst = (
        (new_id[edge_type[0]], new_id[edge_type[-1]]) if meta["is_hetero"] else (new_id, new_id)
    )
    return torch.stack([new_src[edges[0]], new_dst[edges[1]]])


def load_held_out(root: str | Path) -> dict[str, Tensor]:
    """The val / test positives `ensure_link_partition` stored beside the partition."""
    from app.partition.reader import torch_load

    path = Path(root) / LINK_SPLIT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: partition {root} was not made for links")
    return torch_load(path)
