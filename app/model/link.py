"""Link prediction: a GNN encoder for node embeddings and a decoder scoring node pairs.

* `LinkPredictor` (homogeneous): encoder = `SampledGNN` whose last layer outputs
  `hidden_channels` (no activation); with the per-hop counts it returns the seed rows only,
  which is where a LinkNeighborLoader batch's `edge_label_index` points.
* `HeteroLinkPredictor`: `HeteroSAGE` + `NodeEmbeddings` for one `(src, rel, dst)` edge type.
* Decoders: `dot` (inner product) or `mlp` (two layers over the Hadamard product).

`link_objective` understands both negative-sampling layouts of the loader: binary
(`edge_label_index` + 0/1 `edge_label`, BCE, AUC) and triplet (`src_index`, `dst_pos_index`,
`dst_neg_index`, BCE on positives vs. negatives, MRR).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data, HeteroData

from app.model.gnn import SampledGNN
from app.model.hetero import EdgeType, HeteroSAGE, NodeEmbeddings, hetero_counts
from app.train.loop import StepResult, counts_of

DECODERS = ("dot", "mlp")


class Decoder(nn.Module):
    """Scores pairs of embeddings: `dot` or `mlp` over `z_src * z_dst`."""

    def __init__(self, kind: str, channels: int) -> None:
        super().__init__()
        if kind not in DECODERS:
            raise ValueError(f"link decoder {kind!r}: expected one of {', '.join(DECODERS)}")
        self.kind = kind
        self.mlp = (
            nn.Sequential(nn.Linear(channels, channels), nn.ReLU(), nn.Linear(channels, 1))
            if kind == "mlp"
            else None
        )

    def forward(self, z_src: Tensor, z_dst: Tensor) -> Tensor:
        if self.mlp is None:
            return (z_src * z_dst).sum(dim=-1)
        return self.mlp(z_src * z_dst).squeeze(-1)


class LinkPredictor(nn.Module):
    """Homogeneous encoder + decoder; `forward` returns the node embeddings, `score` pairs."""

    def __init__(self, encoder: nn.Module, decoder: Decoder) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        num_sampled_nodes: Sequence[int] | None = None,
        num_sampled_edges: Sequence[int] | None = None,
    ) -> Tensor:
        return self.encoder(x, edge_index, num_sampled_nodes, num_sampled_edges)

    def embed(self, batch: Data) -> tuple[Tensor, Tensor]:
        """(source-side, destination-side) embeddings of a batch: the same table here."""
        nodes, edges = counts_of(batch)
        z = self(batch.x, batch.edge_index, nodes, edges)
        return z, z

    def score(self, z_src: Tensor, z_dst: Tensor) -> Tensor:
        return self.decoder(z_src, z_dst)


class HeteroLinkPredictor(nn.Module):
    """HeteroSAGE (+ embeddings of featureless types) scoring links of one edge type."""

    def __init__(
        self, gnn: HeteroSAGE, embeddings: NodeEmbeddings, edge_type: EdgeType, decoder: Decoder
    ) -> None:
        super().__init__()
        self.gnn, self.embeddings, self.decoder = gnn, embeddings, decoder
        self.edge_type = tuple(edge_type)

    def forward(self, batch: HeteroData) -> dict[str, Tensor]:
        x_dict = {t: batch[t].x for t in batch.node_types if "x" in batch[t]}
        x_dict = self.embeddings.fill(x_dict, {t: batch[t].n_id for t in batch.node_types})
        nodes, edges = hetero_counts(batch)
        return self.gnn(x_dict, batch.edge_index_dict, nodes, edges)

    def embed(self, batch: HeteroData) -> tuple[Tensor, Tensor]:
        z = self(batch)
        return z[self.edge_type[0]], z[self.edge_type[-1]]

    def score(self, z_src: Tensor, z_dst: Tensor) -> Tensor:
        return self.decoder(z_src, z_dst)


def _stores(batch: Data | HeteroData, edge_type: EdgeType | None) -> tuple[Any, Any, Any]:
    if edge_type is None:
        return batch, batch, batch
    return batch[edge_type[0]], batch[edge_type[-1]], batch[edge_type]


def link_objective(model: nn.Module, batch: Data | HeteroData) -> StepResult:
    """BCE on scored links; binary layout → scores/labels (AUC), triplet → reciprocal ranks."""
    bare = getattr(model, "module", model)
    z_src, z_dst = model.embed(batch) if model is bare else _ddp_embed(model, batch)
    src_store, dst_store, edge_store = _stores(batch, getattr(bare, "edge_type", None))
    edges = _num_edges(batch)
    if "src_index" in src_store:  # triplet
        src = src_store.src_index
        pos = bare.score(z_src[src], z_dst[dst_store.dst_pos_index])
        neg_index = dst_store.dst_neg_index.view(src.numel(), -1)
        neg = bare.score(
            z_src[src].unsqueeze(1).expand(-1, neg_index.size(1), -1), z_dst[neg_index]
        )
        loss = F.binary_cross_entropy_with_logits(
            torch.cat([pos, neg.reshape(-1)]),
            torch.cat([torch.ones_like(pos), torch.zeros(neg.numel())]),
        )
        rr = 1.0 / (1 + (neg >= pos[:, None]).sum(dim=1)).to(torch.float64)
        correct = float((neg < pos[:, None]).all(dim=1).sum())
        return StepResult(loss, correct, src.numel(), edges, reciprocal_ranks=rr.detach())
    eli, label = edge_store.edge_label_index, edge_store.edge_label.float()
    scores = bare.score(z_src[eli[0]], z_dst[eli[1]])
    loss = F.binary_cross_entropy_with_logits(scores, label)
    correct = float(((scores > 0).float() == label).sum())
    return StepResult(loss, correct, label.numel(), edges, scores.detach(), label.detach())


def _ddp_embed(model: nn.Module, batch: Data | HeteroData) -> tuple[Tensor, Tensor]:
    """Run the encoder through the DDP wrapper's forward (so gradients get all-reduced)."""
    bare = model.module
    if isinstance(bare, HeteroLinkPredictor):
        z = model(batch)
        return z[bare.edge_type[0]], z[bare.edge_type[-1]]
    nodes, edges = counts_of(batch)
    z = model(batch.x, batch.edge_index, nodes, edges)
    return z, z


def _num_edges(batch: Data | HeteroData) -> int:
    if isinstance(batch, HeteroData):
        return sum(int(batch[et].edge_index.size(1)) for et in batch.edge_types)
    return int(batch.edge_index.size(1))


def build_link_predictor(cfg: Any, in_channels: int) -> LinkPredictor:
    """Homogeneous link model from `cfg.model` (decoder: `model.decoder`, default `dot`)."""
    m = cfg.model
    if m.name not in ("sage", "gcn", "gat"):
        raise ValueError(f"model.name={m.name!r}: link prediction needs a GNN (sage, gcn, gat)")
    encoder = SampledGNN(
        m.name, in_channels, m.hidden_channels, m.hidden_channels, m.num_layers, m.dropout, m.heads
    )
    return LinkPredictor(encoder, Decoder(m.decoder, m.hidden_channels))


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


def link_setup(cfg: Any, data: Data | HeteroData) -> tuple:
    """(model, [Adam], loaders, objective) for homogeneous link prediction in `train_single`."""
    from app.loader import LinkNeighborLoader

    if isinstance(data, HeteroData):
        raise ValueError(
            "train.objective=link runs on homogeneous datasets only for now; "
            "use dataset=synthetic_products or ogbn_products"
        )
    splits = split_edges(data.edge_index, cfg.seed)
    graph = Data(x=data.x, edge_index=splits["train"], num_nodes=data.num_nodes)
    s, ld, t = cfg.sampler, cfg.loader, cfg.train
    eval_cap = t.max_steps_per_epoch * ld.eval_batch_size
    loaders = {}
    for split, links in splits.items():
        train = split == "train"
        loaders[split] = LinkNeighborLoader(
            graph,
            s.num_neighbors,
            edge_label_index=links if train or not eval_cap else links[:, :eval_cap],
            neg_sampling=ld.neg_sampling,
            neg_sampling_ratio=ld.neg_sampling_ratio,
            batch_size=ld.batch_size if train else ld.eval_batch_size,
            shuffle=ld.shuffle and train,
            drop_last=ld.drop_last and train,
            replace=s.replace,
            subgraph_type=s.subgraph_type,
            seed=cfg.seed + (0 if train else 1),
        )
    model = build_link_predictor(cfg, data.x.size(1))
    opt = torch.optim.Adam(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
    return model, [opt], loaders, link_objective
