"""Heterogeneous GraphSAGE for node classification of one target node type (ogbn-mag style).

`HeteroSAGE.forward(x_dict, edge_index_dict, num_sampled_nodes_dict=None,
num_sampled_edges_dict=None)` takes an input row block for EVERY node type: featureless types
get theirs from the caller, normally `NodeEmbeddings` (learnable tables looked up by `n_id`).
Each layer runs one mean-SAGE per edge type on (source rows, destination rows), with the same
CSR aggregation as the homogeneous models, and sums the messages arriving at a node type. With the per-hop counts (the loader's layout: per type, seeds
first, then each hop's new nodes; per edge type, each hop's edges) layer `l` of `L` only reads
hops `0..L-l` and only writes hops `0..L-l-1`, so the last layer computes the seeds alone.
Returns the output rows of every node type that receives edges (all rows, or hop-0 rows when
trimmed).

Layer-wise inference (`app.inference`): `inference_edge_types(l, types)` names the edge types
layer `l` runs given the node types that have layer `l-1` rows, and `inference_layer(l, h_dst,
inputs)` computes one chunk of targets of one type from `{edge type: (source rows, Block)}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import HeteroData

from app.model import ops
from app.model.gnn import CSR, Block, aggregate

EdgeType = tuple[str, str, str]
Metadata = tuple[list[str], list[EdgeType]]


def edge_key(edge_type: EdgeType) -> str:
    return "__".join(edge_type)


class BipartiteSAGE(nn.Module):
    """GraphSAGE (mean) from a source type to a destination type: `W_n mean h_src + W_r h_dst`."""

    def __init__(self, src_channels: int, dst_channels: int, out_channels: int) -> None:
        super().__init__()
        self.lin_neigh = nn.Linear(src_channels, out_channels, bias=True)
        self.lin_root = nn.Linear(dst_channels, out_channels, bias=False)

    def forward(self, h_src: Tensor, h_dst: Tensor, adj: CSR) -> Tensor:
        w, b = self.lin_neigh.weight, self.lin_neigh.bias
        if w.size(0) < w.size(1):  # narrower output: project, then aggregate fewer columns
            neigh = aggregate(adj, h_src @ w.t()) + b
        else:
            neigh = F.linear(aggregate(adj, h_src), w, b)
        return neigh + self.lin_root(h_dst)

    def infer(self, h_src: Tensor, h_dst: Tensor, block: Block) -> Tensor:
        """Layer-wise inference: aggregates first (the block's mean, no per-edge weights), so
        only the source rows the block reads are used."""
        out = torch.addmm(self.lin_neigh.bias, block.mean(h_src), self.lin_neigh.weight.t())
        return out.addmm_(h_dst, self.lin_root.weight.t())


class TypedEdges:
    """One edge type's edges grouped by destination (CSR) with mean weights 1/in-degree."""

    def __init__(self, edge_index: Tensor, num_dst: int) -> None:
        perm, self.crow = ops.group_by(edge_index[1], num_dst)
        self.col = edge_index[0] if perm is None else edge_index[0][perm]
        self.row = edge_index[1] if perm is None else edge_index[1][perm]
        degree = (self.crow[1:] - self.crow[:-1]).clamp(min=1).to(torch.float32)
        self.val = (1.0 / degree)[self.row]

    def adjacency(self, n_in: int, n_out: int, name: str) -> CSR:
        """Rows `[0, n_out)` (destinations) over sources `[0, n_in)`; checks the hop order."""
        nnz = int(self.crow[n_out])
        if nnz and int(self.col[:nnz].max()) >= n_in:
            raise ValueError(
                f"{name}: an edge source lies beyond the {n_in} input rows of its layer; "
                "batches must be in NeighborLoader hop order (or omit the per-hop counts)"
            )
        return CSR(self.crow[: n_out + 1], self.col[:nnz], self.val[:nnz], self.row[:nnz], n_in)


def _rows(h: Tensor, n: int) -> Tensor:
    return h if h.size(0) == n else h[:n]


class HeteroSAGE(nn.Module):
    """Per-edge-type SAGE layers, summed per destination type; ReLU + dropout between."""

    def __init__(
        self,
        metadata: Metadata,
        in_channels: dict[str, int],
        hidden_channels: int,
        out_channels: int,
        num_layers: int,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        node_types, edge_types = metadata
        missing = [t for t in node_types if t not in in_channels]
        if missing:
            raise ValueError(f"in_channels has no width for node types {missing}")
        self.edge_types = [tuple(et) for et in edge_types]
        self.num_layers, self.dropout = num_layers, dropout
        self.widths = [hidden_channels] * (num_layers - 1) + [out_channels]
        self.layers = nn.ModuleList()
        dims = dict(in_channels)
        for i in range(num_layers):
            width = out_channels if i == num_layers - 1 else hidden_channels
            convs = {
                edge_key(et): BipartiteSAGE(dims[et[0]], dims[et[-1]], width)
                for et in self.edge_types
            }
            self.layers.append(nn.ModuleDict(convs))
            dims = {t: width for t in node_types}

    def forward(
        self,
        x_dict: dict[str, Tensor],
        edge_index_dict: dict[EdgeType, Tensor],
        num_sampled_nodes_dict: dict[str, list[int]] | None = None,
        num_sampled_edges_dict: dict[EdgeType, list[int]] | None = None,
    ) -> dict[str, Tensor]:
        present = [et for et in self.edge_types if et in edge_index_dict]
        _check_edge_counts(edge_index_dict, num_sampled_edges_dict)
        graphs = {
            et: TypedEdges(edge_index_dict[et], x_dict[et[-1]].size(0))
            for et in present
            if et[0] in x_dict and et[-1] in x_dict
        }
        h = dict(x_dict)
        for i, convs in enumerate(self.layers):
            sizes = self._sizes(h, i, num_sampled_nodes_dict)
            out: dict[str, Tensor] = {}
            for et, graph in graphs.items():
                src, dst = et[0], et[-1]
                if src not in h or dst not in h:
                    continue
                n_in, n_out = sizes[src][0], sizes[dst][1]
                adj = graph.adjacency(n_in, n_out, edge_key(et))
                msg = convs[edge_key(et)](_rows(h[src], n_in), _rows(h[dst], n_out), adj)
                out[dst] = msg if dst not in out else out[dst] + msg
            if i < self.num_layers - 1:
                out = {
                    t: ops.dropout(F.relu(v), self.dropout, self.training) for t, v in out.items()
                }
            h = out
        return h

    @property
    def num_inference_layers(self) -> int:
        return self.num_layers

    needs_degree = False

    def inference_width(self, layer: int) -> int:
        return self.widths[layer]

    def inference_edge_types(self, layer: int, types: set[str]) -> list[EdgeType]:
        """Edge types layer `layer` runs when `types` have input rows (as `forward` does)."""
        return [et for et in self.edge_types if et[0] in types and et[-1] in types]

    def inference_layer(
        self, layer: int, h_dst: Tensor, inputs: dict[EdgeType, tuple[Tensor, Block]]
    ) -> Tensor:
        """One chunk of targets of one node type: the sum over its incoming edge types."""
        convs = self.layers[layer]
        out = None
        for et, (h_src, block) in inputs.items():
            msg = convs[edge_key(et)].infer(h_src, h_dst, block)
            out = msg if out is None else out.add_(msg)
        if out is None:
            raise ValueError(f"layer {layer}: no edge type feeds this node type")
        return out.relu_() if layer < self.num_layers - 1 else out

    def _sizes(
        self, h: dict[str, Tensor], layer: int, counts: dict[str, list[int]] | None
    ) -> dict[str, tuple[int, int]]:
        """(rows read, rows written) per node type at `layer`."""
        if counts is None:
            return {t: (v.size(0), v.size(0)) for t, v in h.items()}
        keep = self.num_layers - layer
        for t in h:
            if len(counts[t]) != self.num_layers + 1:
                raise ValueError(
                    f"num_sampled_nodes[{t!r}] has {len(counts[t]) - 1} hops after the seeds "
                    f"for a {self.num_layers}-layer model; sample one hop per layer"
                )
        return {t: (sum(counts[t][: keep + 1]), sum(counts[t][:keep])) for t in h}


def _check_edge_counts(
    edge_index_dict: dict[EdgeType, Tensor], counts: dict[EdgeType, list[int]] | None
) -> None:
    for et, ei in edge_index_dict.items():
        if counts is not None and et in counts and sum(counts[et]) != ei.size(1):
            raise ValueError(
                f"num_sampled_edges[{et}] sums to {sum(counts[et])} but there are {ei.size(1)} edges"
            )


class NodeEmbeddings:
    """Learnable input rows for featureless node types: one `nn.Embedding(sparse=True)` each.

    Not an `nn.Module` on purpose: the tables live beside the model (like `DistEmbedding`
    rows), so DDP never all-reduces them, the dense optimizer never sees them, and a checkpoint
    stores them in the same place at every node count. Step them with a sparse optimizer.
    """

    def __init__(self, num_nodes: dict[str, int], dim: int) -> None:
        self.tables = {t: nn.Embedding(n, dim, sparse=True) for t, n in num_nodes.items()}
        for table in self.tables.values():
            nn.init.normal_(table.weight, std=0.1)

    def parameters(self) -> list[nn.Parameter]:
        return [table.weight for table in self.tables.values()]

    def to(self, device: torch.device | str) -> NodeEmbeddings:
        for table in self.tables.values():
            table.to(device)
        return self

    def fill(self, x_dict: dict[str, Tensor], n_id_dict: dict[str, Tensor]) -> dict[str, Tensor]:
        """`x_dict` plus a looked-up row block for every type with a table."""
        out = dict(x_dict)
        for t, table in self.tables.items():
            if t in n_id_dict:
                out[t] = table(n_id_dict[t].to(table.weight.device))
        return out


class InputRows(Protocol):
    """Anything that adds the featureless types' input rows (`NodeEmbeddings`, distributed
    tables) to a batch's `x_dict`, given every type's global node ids; `tables` holds each
    type's rows (a `.weight` each), which layer-wise inference reads whole."""

    tables: Mapping[str, Any]

    def fill(
        self, x_dict: dict[str, Tensor], n_id_dict: dict[str, Tensor]
    ) -> dict[str, Tensor]: ...


def embedding_rows(embeddings: InputRows) -> dict[str, Tensor]:
    """{node type: its whole table} of `embeddings` (what layer-wise inference reads)."""
    return {t: table.weight for t, table in embeddings.tables.items()}


def hetero_inputs(
    batch: HeteroData, embeddings: InputRows
) -> tuple[dict[str, Tensor], dict | None, dict | None]:
    """(x_dict with embedding rows filled in, per-type hop counts) of a hetero batch."""
    # float16 features (dataset.feature_dtype) computed in float32, on the batch's device
    x_dict = {t: batch[t].x.float() for t in batch.node_types if "x" in batch[t]}
    x_dict = embeddings.fill(x_dict, {t: batch[t].n_id for t in batch.node_types})
    nodes, edges = hetero_counts(batch)
    return x_dict, nodes, edges


class HeteroNodeClassifier(nn.Module):
    """HeteroSAGE over a batch's features and embedding rows; forward(batch) → seed logits.

    `embeddings` is a plain attribute (not a submodule): see `NodeEmbeddings`.
    """

    def __init__(self, gnn: HeteroSAGE, embeddings: InputRows, target: str) -> None:
        super().__init__()
        self.gnn, self.target = gnn, target
        self.__dict__["embeddings"] = embeddings  # bypass nn.Module registration

    def layerwise_parts(self) -> tuple[HeteroSAGE, dict[str, Tensor]]:
        """`LayerwiseWrapper`: the GNN and the embedding rows of featureless types."""
        return self.gnn, embedding_rows(self.embeddings)

    def forward(self, batch: HeteroData) -> Tensor:
        x_dict, nodes, edges = hetero_inputs(batch, self.embeddings)
        out = self.gnn(x_dict, batch.edge_index_dict, nodes, edges)
        return out[self.target][: int(batch[self.target].batch_size)]


def hetero_counts(batch: HeteroData) -> tuple[dict | None, dict | None]:
    """Per-type hop counts when every node and edge type of the batch carries them."""
    if not all("num_sampled_nodes" in batch[t] for t in batch.node_types):
        return None, None
    if not all("num_sampled_edges" in batch[et] for et in batch.edge_types):
        return None, None
    nodes = {t: [int(c) for c in batch[t].num_sampled_nodes] for t in batch.node_types}
    edges = {et: [int(c) for c in batch[et].num_sampled_edges] for et in batch.edge_types}
    return nodes, edges


def check_hetero_model(name: str) -> None:
    if name != "sage":
        raise ValueError(f"model.name={name!r}: heterogeneous graphs support model=sage only")


def build_hetero_classifier(
    m: Any,
    metadata: Metadata,
    in_channels: dict[str, int],
    num_classes: int,
    target: str,
    embeddings: InputRows,
) -> HeteroNodeClassifier:
    """`HeteroNodeClassifier` from `ModelConfig` `m` over a graph schema."""
    check_hetero_model(m.name)
    gnn = HeteroSAGE(metadata, in_channels, m.hidden_channels, num_classes, m.num_layers, m.dropout)
    return HeteroNodeClassifier(gnn, embeddings, target)
