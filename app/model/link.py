"""Link prediction: a GNN encoder for node embeddings and a decoder scoring node pairs.

* `LinkPredictor` (homogeneous): encoder = `SampledGNN` whose last layer outputs
  `hidden_channels` (no activation); with the per-hop counts it returns the seed rows only,
  which is where a LinkNeighborLoader batch's `edge_label_index` points.
* `HeteroLinkPredictor`: `HeteroSAGE` + `NodeEmbeddings` for one `(src, rel, dst)` edge type.
* Decoders: `dot` (inner product) or `mlp` (two layers over the Hadamard product).

`link_objective` understands both negative-sampling layouts of the loader: binary
(`edge_label_index` + 0/1 `edge_label`, BCE, AUC) and triplet (`src_index`, `dst_pos_index`,
`dst_neg_index`, BCE on positives vs. negatives, MRR).

`link_setup` builds the single-process job: homogeneous graphs predict their own edges;
heterogeneous (ogbn-mag-shaped) graphs predict `HETERO_LINK_TYPE` (paper → field_of_study),
message passing over a copy without the held-out links and their `rev_has_topic` reverses.
"""

from __future__ import annotations

import copy
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


# Link type predicted on heterogeneous (ogbn-mag-shaped) graphs; its val/test links are removed
# from it and from its reverse `rev_has_topic`, so neither direction passes messages.
HETERO_LINK_TYPE: EdgeType = ("paper", "has_topic", "field_of_study")
HETERO_DEFAULT_DIM = 32  # embedding width of featureless types when model.embedding_dim=0


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


def build_hetero_link_predictor(
    cfg: Any, data: HeteroData, edge_type: EdgeType
) -> HeteroLinkPredictor:
    """HeteroSAGE (out = hidden width) + `model.embedding_dim` tables (default 32) + decoder."""
    m = cfg.model
    if m.name != "sage":
        raise ValueError(f"model.name={m.name!r}: heterogeneous graphs support model=sage only")
    dim = m.embedding_dim or HETERO_DEFAULT_DIM
    featureless = {t: data[t].num_nodes for t in data.node_types if "x" not in data[t]}
    in_channels = {t: (data[t].x.size(1) if "x" in data[t] else dim) for t in data.node_types}
    gnn = HeteroSAGE(
        data.metadata(), in_channels, m.hidden_channels, m.hidden_channels, m.num_layers, m.dropout
    )
    decoder = Decoder(m.decoder, m.hidden_channels)
    return HeteroLinkPredictor(gnn, NodeEmbeddings(featureless, dim), edge_type, decoder)


def _link_loaders(
    cfg: Any, graph: Data | HeteroData, splits: dict[str, Tensor], edge_type: EdgeType | None
) -> dict[str, Any]:
    """Train loader (`loader.neg_sampling`) and val / test loaders (eval capped in smoke runs).

    Homogeneous val / test use `loader.neg_sampling` too; heterogeneous ones always use binary
    negatives so the held-out links get an AUC.
    """
    from app.loader import LinkNeighborLoader

    s, ld, t = cfg.sampler, cfg.loader, cfg.train
    eval_cap = t.max_steps_per_epoch * ld.eval_batch_size
    loaders = {}
    for split, links in splits.items():
        train = split == "train"
        links = links if train or not eval_cap else links[:, :eval_cap]
        loaders[split] = LinkNeighborLoader(
            graph,
            s.num_neighbors,
            edge_label_index=links if edge_type is None else (edge_type, links),
            neg_sampling=ld.neg_sampling if train or edge_type is None else "binary",
            neg_sampling_ratio=ld.neg_sampling_ratio,
            batch_size=ld.batch_size if train else ld.eval_batch_size,
            shuffle=ld.shuffle and train,
            drop_last=ld.drop_last and train,
            replace=s.replace,
            subgraph_type=s.subgraph_type,
            seed=cfg.seed + (0 if train else 1),
        )
    return loaders


def hetero_link_setup(cfg: Any, data: HeteroData) -> tuple:
    """(model, [Adam, sparse optimizer], loaders, objective) predicting `HETERO_LINK_TYPE`."""
    splits = split_hetero_edges(data, HETERO_LINK_TYPE, cfg.seed)
    graph = message_graph(data, HETERO_LINK_TYPE, splits)
    model = build_hetero_link_predictor(cfg, graph, HETERO_LINK_TYPE)
    t = cfg.train
    dense = [p for n, p in model.named_parameters() if not n.startswith("embeddings.")]
    optimizers: list[torch.optim.Optimizer] = [
        torch.optim.Adam(dense, lr=t.lr, weight_decay=t.weight_decay)
    ]
    sparse = list(model.embeddings.parameters())
    if sparse:
        sparse_opt = (
            torch.optim.Adagrad if t.sparse_optimizer == "adagrad" else torch.optim.SparseAdam
        )
        optimizers.append(sparse_opt(sparse, lr=t.sparse_lr))
    return model, optimizers, _link_loaders(cfg, graph, splits, HETERO_LINK_TYPE), link_objective


def link_setup(cfg: Any, data: Data | HeteroData) -> tuple:
    """(model, optimizers, loaders, objective) for link prediction in `train_single`.

    Homogeneous graphs predict their own edges; heterogeneous ones `HETERO_LINK_TYPE`.
    """
    if isinstance(data, HeteroData):
        return hetero_link_setup(cfg, data)
    splits = split_edges(data.edge_index, cfg.seed)
    graph = Data(x=data.x, edge_index=splits["train"], num_nodes=data.num_nodes)
    loaders = _link_loaders(cfg, graph, splits, None)
    model = build_link_predictor(cfg, data.x.size(1))
    t = cfg.train
    opt = torch.optim.Adam(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
    return model, [opt], loaders, link_objective
