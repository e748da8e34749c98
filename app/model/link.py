"""Link prediction: a GNN encoder for node embeddings and a decoder scoring node pairs.

* `LinkPredictor` (homogeneous): encoder = `SampledGNN` whose last layer outputs
  `hidden_channels` (no activation); with the per-hop counts it returns the seed rows only,
  which is where a LinkNeighborLoader batch's `edge_label_index` points.
* `HeteroLinkPredictor`: `HeteroSAGE` + input rows of featureless types, for one
  `(src, rel, dst)` edge type.
* Decoders: `dot` (inner product) or `mlp` (two layers over the Hadamard product).

Both predictors' `forward(batch)` returns `(z_src, z_dst)`, the embeddings the batch's labelled
pairs index; `forward(batch, pairs)` also scores `pairs` (row indices into z_src, z_dst), so a
DDP wrapper sees the decoder's weights in its graph (a hetero model's DDP looks for unused
weights, and a decoder run outside `forward` would be counted twice). `score` runs on the bare
module (evaluation).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn
from torch_geometric.data import Data, HeteroData

from app.model.hetero import (
    EdgeType,
    HeteroSAGE,
    InputRows,
    Metadata,
    check_hetero_model,
    embedding_rows,
    hetero_inputs,
)
from app.model.registry import build_model

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


Pairs = tuple[Tensor, Tensor]  # (rows of z_src, rows of z_dst), any equal shapes


def _with_scores(model: nn.Module, z_src: Tensor, z_dst: Tensor, pairs: Pairs | None) -> tuple:
    """(z_src, z_dst), plus the scores of `pairs` when given."""
    if pairs is None:
        return z_src, z_dst
    return z_src, z_dst, model.score(z_src[pairs[0]], z_dst[pairs[1]])


def _hop_counts(batch: Data) -> tuple[list[int] | None, list[int] | None]:
    nodes = getattr(batch, "num_sampled_nodes", None)
    edges = getattr(batch, "num_sampled_edges", None)
    if nodes is None or edges is None:
        return None, None
    return [int(n) for n in nodes], [int(e) for e in edges]


class LinkPredictor(nn.Module):
    """Homogeneous encoder + decoder; `forward(batch)` → (z, z), `score` pairs."""

    def __init__(self, encoder: nn.Module, decoder: Decoder) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.edge_type = None

    def layerwise_parts(self) -> tuple[nn.Module, dict[str, Tensor]]:
        """`LayerwiseWrapper`: the encoder computes the node embeddings."""
        return self.encoder, {}

    def forward(self, batch: Data, pairs: Pairs | None = None) -> tuple[Tensor, ...]:
        nodes, edges = _hop_counts(batch)
        z = self.encoder(batch.x, batch.edge_index, nodes, edges)
        return _with_scores(self, z, z, pairs)

    def embed(self, batch: Data) -> tuple[Tensor, Tensor]:
        """(source-side, destination-side) embeddings of a batch: the same table here."""
        return self(batch)

    def score(self, z_src: Tensor, z_dst: Tensor) -> Tensor:
        return self.decoder(z_src, z_dst)


class HeteroLinkPredictor(nn.Module):
    """HeteroSAGE (+ rows of featureless types) scoring links of one edge type.

    `embeddings` is a plain attribute, not a submodule (see `app.model.hetero.NodeEmbeddings`).
    """

    def __init__(
        self, gnn: HeteroSAGE, embeddings: InputRows, edge_type: EdgeType, decoder: Decoder
    ) -> None:
        super().__init__()
        self.gnn, self.decoder = gnn, decoder
        self.__dict__["embeddings"] = embeddings
        self.edge_type = tuple(edge_type)

    def layerwise_parts(self) -> tuple[HeteroSAGE, dict[str, Tensor]]:
        """`LayerwiseWrapper`: the GNN and the embedding rows of featureless types."""
        return self.gnn, embedding_rows(self.embeddings)

    def forward(self, batch: HeteroData, pairs: Pairs | None = None) -> tuple[Tensor, ...]:
        x_dict, nodes, edges = hetero_inputs(batch, self.embeddings)
        z = self.gnn(x_dict, batch.edge_index_dict, nodes, edges)
        return _with_scores(self, z[self.edge_type[0]], z[self.edge_type[-1]], pairs)

    def embed(self, batch: HeteroData) -> tuple[Tensor, Tensor]:
        return self(batch)

    def score(self, z_src: Tensor, z_dst: Tensor) -> Tensor:
        return self.decoder(z_src, z_dst)


def build_link_predictor(cfg: Any, in_channels: int) -> LinkPredictor:
    """Homogeneous link model from `cfg.model` (decoder: `model.decoder`, default `dot`)."""
    m = cfg.model
    if m.name == "mlp":
        raise ValueError(f"model.name={m.name!r}: link prediction needs a GNN (not mlp)")
    encoder = build_model(m, in_channels, m.hidden_channels)
    return LinkPredictor(encoder, Decoder(m.decoder, m.hidden_channels))


def build_hetero_link_predictor(
    m: Any,
    metadata: Metadata,
    in_channels: dict[str, int],
    edge_type: EdgeType,
    embeddings: InputRows,
) -> HeteroLinkPredictor:
    """HeteroSAGE (out = hidden width) over a schema + decoder, from `ModelConfig` `m`."""
    check_hetero_model(m.name)
    gnn = HeteroSAGE(
        metadata, in_channels, m.hidden_channels, m.hidden_channels, m.num_layers, m.dropout
    )
    return HeteroLinkPredictor(gnn, embeddings, edge_type, Decoder(m.decoder, m.hidden_channels))
