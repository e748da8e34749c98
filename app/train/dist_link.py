"""Distributed link prediction (homogeneous graphs): the edge split, the loaders, the metrics.

Held-out edges must not carry messages, so the split happens BEFORE partitioning, in the
launcher: `ensure_link_partition` splits the dataset's edges with `split_edges(edge_index,
cfg.seed)` (5 % val, 5 % test), partitions the graph of the training edges only and stores the
val / test edges in `<root>/link_split.pt`. The partition's dataset fingerprint carries the
split (`<dataset fp>-link-s<seed>`) and its folder ends in `-link`, so it never clashes with the
node-classification partition of the same dataset.

Each trainer's training positives are the edges of its own part (every edge is stored with its
destination's owner), cut across the node's trainers; val / test edges are cut across all
trainers. Training batches use `loader.neg_sampling`; evaluation batches are triplets with
`EVAL_NEGATIVES` random destinations per positive, which yields both AUC (positives vs. their
negatives) and MRR (rank of each positive among its negatives).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.data import Data, HeteroData

from app.config import Config, ConfigError
from app.fsutil import torch_save_atomic
from app.model.link import build_link_predictor, link_objective, split_edges
from app.partition.reader import PartitionData, torch_load
from app.runtime import Runtime
from app.train.loop import StepResult

log = logging.getLogger("distgnn.train")

LINK_SPLIT_FILE = "link_split.pt"
SPLIT_VERSION = 2  # 2: split by unordered pair (a held-out edge's reverse is held out too)
EVAL_NEGATIVES = 20  # random destinations ranked against each held-out positive


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
    """Partition of the training edges plus `link_split.pt` (val / test edges); reused if present.

    Raises:
        ConfigError: heterogeneous dataset, or `partition.relabel=true` (held-out edges are kept
            in original ids).
    """
    from app.partition.task import write_partition
    from app.partition.writer import find_existing

    if cfg.partition.relabel:
        raise ConfigError(
            "partition.relabel=true: distributed link prediction keeps held-out edges in "
            "original ids; set partition.relabel=false"
        )
    root, fp, dataset_fp = link_partition_root(cfg)
    existing = find_existing(root, fp, cfg.partition.overwrite)
    if existing is not None and (root / LINK_SPLIT_FILE).is_file():
        log.info("reusing link partition %s", root)
        return root
    from app.dataset import load_dataset

    data = load_dataset(cfg.dataset, cfg.seed)
    if isinstance(data, HeteroData):
        raise ConfigError(
            f"dataset.name={cfg.dataset.name!r} is heterogeneous: distributed link prediction "
            "runs on homogeneous graphs (synthetic_products, ogbn_products)"
        )
    splits = split_edges(data.edge_index, cfg.seed)
    if existing is None:
        node_attrs = {k: v for k, v in data.items() if k != "edge_index" and data.is_node_attr(k)}
        graph = Data(edge_index=splits["train"], num_nodes=data.num_nodes, **node_attrs)
        write_partition(cfg, graph, root, dataset_fp)
    held_out = {"val": splits["val"].contiguous(), "test": splits["test"].contiguous()}
    torch_save_atomic(held_out, root / LINK_SPLIT_FILE)
    return root


def link_edges(runtime: Runtime, part: PartitionData, eval_cap: int = 0) -> dict[str, Tensor]:
    """This trainer's `[2, E]` positives per split (global ids; eval splits at most `eval_cap`).

    train: the edges of this node's part, cut across the node's trainers; val / test: the
    held-out edges cut across all trainers.
    """
    path = Path(part.root) / LINK_SPLIT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: partition {part.root} was not made for links")
    held_out = torch_load(path)
    g = part.graph
    local = torch.stack([g["row"], g["col"]])
    out = {"train": local.tensor_split(runtime.procs_per_node, dim=1)[runtime.local_rank]}
    for split in ("val", "test"):
        share = held_out[split].tensor_split(runtime.world_size, dim=1)[runtime.rank]
        out[split] = share[:, :eval_cap] if eval_cap else share
    return out


def make_loaders(
    cfg: Config, edges: dict[str, Tensor], stores: tuple[Any, Any], common: dict[str, Any]
) -> dict[str, Any]:
    """Train loader (`loader.neg_sampling`) and triplet val / test loaders (`EVAL_NEGATIVES`)."""
    from app.distributed.loader import DistLinkNeighborLoader

    ld = cfg.loader
    out = {}
    for split, positives in edges.items():
        train = split == "train"
        out[split] = DistLinkNeighborLoader(
            stores,
            edge_label_index=positives,
            neg_sampling=ld.neg_sampling if train else "triplet",
            neg_sampling_ratio=ld.neg_sampling_ratio if train else EVAL_NEGATIVES,
            batch_size=ld.batch_size if train else ld.eval_batch_size,
            shuffle=ld.shuffle and train,
            drop_last=ld.drop_last and train,
            **common,
        )
    return out


def build_model(cfg: Config, part: PartitionData) -> nn.Module:
    """The link predictor, identically initialised on every rank (wrap it in DDP)."""
    in_channels = int(part.node_feats["feats"]["x"].size(1))
    torch.manual_seed(cfg.seed)
    return build_link_predictor(cfg, in_channels)


def link_metrics_objective(model: nn.Module, batch: Data) -> StepResult:
    """`link_objective`, except on (bare-model) triplet eval batches: scores, labels AND ranks.

    The triplet branch scores each positive and its negatives, so `eval_metrics` reports both
    `auc` (positives vs. negatives) and `mrr`.
    """
    if isinstance(model, DistributedDataParallel) or "src_index" not in batch:
        return link_objective(model, batch)
    z_src, z_dst = model.embed(batch)
    src = batch.src_index
    pos = model.score(z_src[src], z_dst[batch.dst_pos_index])
    neg_index = batch.dst_neg_index.view(src.numel(), -1)
    neg = model.score(z_src[src].unsqueeze(1).expand(-1, neg_index.size(1), -1), z_dst[neg_index])
    scores = torch.cat([pos, neg.reshape(-1)])
    labels = torch.cat([torch.ones_like(pos), torch.zeros(neg.numel())])
    loss = F.binary_cross_entropy_with_logits(scores, labels)
    rr = 1.0 / (1 + (neg >= pos[:, None]).sum(dim=1)).to(torch.float64)
    correct = float((neg < pos[:, None]).all(dim=1).sum())
    edges = int(batch.edge_index.size(1))
    return StepResult(loss, correct, src.numel(), edges, scores, labels.long(), rr)


__all__ = [
    "EVAL_NEGATIVES",
    "LINK_SPLIT_FILE",
    "build_model",
    "ensure_link_partition",
    "link_edges",
    "link_metrics_objective",
    "make_loaders",
]
