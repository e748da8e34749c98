"""Distributed heterogeneous node classification: what `train_distributed` needs beyond homo.

The model is `app.model.hetero`'s `HeteroSAGE` inside a `HeteroNodeClassifier`, built from the
partition's META.json (schema, node counts) instead of a loaded `HeteroData`. Node types without
features get `DistEmbedding` tables (`model.embedding_dim` wide, default `hidden_channels`)
sharded like the graph: a batch looks up the rows of its global `n_id` per type, locally or by
RPC, and `SparseAdam` / `SparseAdagrad` push the gradients of exactly those rows to their owners.
The tables are not module parameters, so DDP only all-reduces the GNN weights.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from app.config import Config
from app.distributed.embedding import DistEmbedding
from app.distributed.optim import SparseAdagrad, SparseAdam, SparseOptimizer
from app.model.hetero import HeteroNodeClassifier, HeteroSAGE, hetero_node_objective
from app.partition.book import load_partition_book
from app.partition.reader import PartitionData
from app.runtime import Runtime
from app.train.metrics import all_reduce

PROBE_ROWS = 256  # rows per featureless type compared before/after training


def featured(part: PartitionData) -> dict[str, int]:
    """Input width of every node type that has an `x` in the partition."""
    return {
        t: int(nf["feats"]["x"].size(1)) for t, nf in part.node_feats.items() if "x" in nf["feats"]
    }


def target_type(part: PartitionData) -> str:
    """The labelled node type: the one with `y` and training seeds."""
    labelled = [
        t
        for t, nf in part.node_feats.items()
        if "y" in nf["feats"] and t in part.seeds.get("train", {})
    ]
    if len(labelled) != 1:
        raise ValueError(f"expected exactly one labelled node type, found {labelled}")
    return labelled[0]


def hetero_num_classes(part: PartitionData, target: str) -> int:
    """Classes over every partition: the largest label of `target`, plus one."""
    y = part.node_feats[target]["feats"]["y"]
    (top,) = all_reduce([float(y.max()) if y.numel() else -1.0], op="max")
    return int(top) + 1


class DistNodeEmbeddings:
    """`NodeEmbeddings.fill` over `DistEmbedding` tables (one per featureless node type)."""

    def __init__(self, tables: dict[str, DistEmbedding]) -> None:
        self.tables = tables

    def fill(self, x_dict: dict[str, Tensor], n_id_dict: dict[str, Tensor]) -> dict[str, Tensor]:
        out = dict(x_dict)
        for t, table in self.tables.items():
            if t in n_id_dict:
                out[t] = table(n_id_dict[t])
        return out

    @torch.no_grad()
    def probe(self) -> dict[str, Tensor]:
        """Copies of the first `PROBE_ROWS` rows of every table (to see that training moved them)."""
        return {
            t: table(torch.arange(min(PROBE_ROWS, table.num_embeddings))).clone()
            for t, table in self.tables.items()
        }


def make_embeddings(runtime: Runtime, part: PartitionData, dim: int) -> DistNodeEmbeddings:
    """One `DistEmbedding` per featureless node type; call on every trainer once RPC is up.

    Ends with a barrier on the trainers' group, so no rank looks rows up before every owner
    has created its shard.
    """
    widths = featured(part)
    num_nodes = part.meta["num_nodes"]
    tables = {
        t: DistEmbedding(
            int(num_nodes[t]),
            dim,
            f"emb_{t}",
            book=load_partition_book(part.root, t),
            part_id=runtime.node_rank,
            is_owner=runtime.local_rank == 0,
        )
        for t in part.meta["node_types"]
        if t not in widths
    }
    dist.barrier()
    return DistNodeEmbeddings(tables)


def build_model(cfg: Config, part: PartitionData, embeddings: DistNodeEmbeddings) -> nn.Module:
    """`HeteroNodeClassifier` over the partition's schema, identically initialised on every rank."""
    m = cfg.model
    if m.name != "sage":
        raise ValueError(f"model.name={m.name!r}: heterogeneous graphs support model=sage only")
    target = target_type(part)
    dim = m.embedding_dim or m.hidden_channels
    in_channels = {t: featured(part).get(t, dim) for t in part.meta["node_types"]}
    metadata = (list(part.meta["node_types"]), [tuple(et) for et in part.meta["edge_types"]])
    classes = hetero_num_classes(part, target)
    torch.manual_seed(cfg.seed)
    gnn = HeteroSAGE(metadata, in_channels, m.hidden_channels, classes, m.num_layers, m.dropout)
    # `embeddings` is no nn.Module, so it stays a plain attribute (no parameters for DDP)
    return HeteroNodeClassifier(gnn, embeddings, target)  # type: ignore[arg-type]


class DenseAndSparse(torch.optim.Optimizer):
    """Steps the dense optimizer (GNN weights) and the sparse one (embedding rows) together.

    `state_dict` holds the dense part only: the embedding rows and their optimizer state live
    in the owners' shards and are not checkpointed.
    """

    def __init__(self, dense: torch.optim.Optimizer, sparse: SparseOptimizer | None) -> None:
        self.dense, self.sparse = dense, sparse
        super().__init__([p for g in dense.param_groups for p in g["params"]], {})

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.dense.zero_grad(set_to_none=set_to_none)
        if self.sparse is not None:
            self.sparse.zero_grad()

    def step(self, closure: Any = None) -> None:
        self.dense.step()
        if self.sparse is not None:
            self.sparse.step()

    def state_dict(self) -> dict[str, Any]:
        return self.dense.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.dense.load_state_dict(state_dict)


def make_optimizer(cfg: Config, model: nn.Module, embeddings: DistNodeEmbeddings) -> DenseAndSparse:
    """Adam on the DDP parameters plus the configured sparse optimizer on the tables."""
    t = cfg.train
    dense = torch.optim.Adam(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
    tables = list(embeddings.tables.values())
    kind = SparseAdagrad if t.sparse_optimizer == "adagrad" else SparseAdam
    return DenseAndSparse(dense, kind(tables, t.sparse_lr) if tables else None)


def embedding_change(before: dict[str, Tensor], embeddings: DistNodeEmbeddings) -> dict[str, float]:
    """`emb_change.<type>`: mean absolute change of the probed rows since `before`."""
    after = embeddings.probe()
    return {f"emb_change.{t}": float((after[t] - rows).abs().mean()) for t, rows in before.items()}


def input_nodes(part: PartitionData, split: str) -> tuple[str, Tensor]:
    """(target type, this node's seeds of `split`) for a hetero `DistNeighborLoader`."""
    target = target_type(part)
    return target, part.seeds[split][target]


__all__ = [
    "DenseAndSparse",
    "DistNodeEmbeddings",
    "build_model",
    "embedding_change",
    "hetero_node_objective",
    "input_nodes",
    "make_embeddings",
    "make_optimizer",
    "target_type",
]
