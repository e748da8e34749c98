"""Homogeneous GNNs for sampled mini-batches: GraphSAGE, GCN, GAT and an MLP baseline.

Two things make these faster than PyG's `BasicGNN` on CPU without pyg-lib/torch-sparse
(measured by `bench/model.py`):

* Trim-to-layer. A NeighborLoader batch lists nodes hop by hop (seeds first) and edges hop
  by hop; layer `l` of `L` only needs the nodes of hops `0..L-l` as inputs and produces the
  nodes of hops `0..L-l-1`. `SampledGraph` groups the edges by destination once per batch (CSR;
  a no-op check when the loader already emits them in that order, an O(E) counting sort
  otherwise), after which every layer's adjacency is a prefix of rows of that CSR. The host
  reads the order check and every layer's edge count back at once (on a GPU a read-back
  waits for the device).
* Sparse aggregation. Mean (SAGE) and normalised (GCN) aggregation are one CSR x dense
  product per layer (`CSRMatmul` over `app.model.ops.spmm`: a numba kernel over destination
  rows on the CPU, which measured faster than `torch.sparse.mm` there, cuSPARSE elsewhere;
  backward through the transposed CSR): no `[E, F]` message tensor is ever materialised. When
  a layer shrinks the width, the linear map runs before the aggregation (fewer columns to
  aggregate).

Every tensor a model creates is made on its inputs' device, so the same code trains on a GPU.

`forward(x, edge_index, num_sampled_nodes=None, num_sampled_edges=None)` contract of every
model here: without the per-hop counts the whole graph is used and one row per input node is
returned; with them, only the rows of hop 0 (the seeds: the first `num_sampled_nodes[0]`
rows) are returned. Either way `out[:batch_size]` are the seed logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from app.config import ModelConfig
from app.model import ops


class CSR:
    """A sparse `[n_rows, n_cols]` matrix in CSR form; `row` holds each entry's row index."""

    def __init__(self, crow: Tensor, col: Tensor, val: Tensor, row: Tensor, n_cols: int) -> None:
        self.crow, self.col, self.val, self.row = crow, col, val, row
        self.n_rows, self.n_cols = crow.numel() - 1, n_cols

    def matmul(self, h: Tensor) -> Tensor:
        """`self @ h` for a dense float32 `h` of `n_cols` rows."""
        return ops.spmm(self.crow, self.col, self.val, h, self.n_rows)

    def t(self) -> CSR:
        """The transpose (entries re-sorted by column), for the backward pass."""
        perm, crow = ops.sort_groups(self.col, self.n_cols)  # sources: no order to check
        return CSR(crow, self.row[perm], self.val[perm], self.col[perm], self.n_rows)


class CSRMatmul(torch.autograd.Function):
    """`adj @ h` with gradient `adj.T @ grad` for `h` (the adjacency is constant)."""

    @staticmethod
    def forward(ctx: Any, h: Tensor, adj: CSR) -> Tensor:
        ctx.adj = adj
        return adj.matmul(h)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None
        return ctx.adj.t().matmul(grad), None


def aggregate(adj: CSR, h: Tensor) -> Tensor:
    if h.dtype == torch.bfloat16 and torch.is_autocast_enabled(h.device.type):
        h = h.float()  # train.precision=bf16-mixed: the sparse sum's kernels are float32 only
    if h.dtype != torch.float32:
        raise ValueError(f"node features must be float32, got {h.dtype}")
    return CSRMatmul.apply(h, adj)


class SampledGraph:
    """A batch's edges sorted by destination (CSR), with each layer's input/output node counts.

    With `num_sampled_nodes` (one count per hop, seeds first) layer `l` reads the first
    `n_in[l] = sum(nodes[: L - l + 1])` rows and writes the first `n_out[l] = sum(nodes[: L - l])`
    rows; the edges it needs are exactly those whose destination is below `n_out[l]`, i.e. a
    prefix of the CSR. Without counts every layer maps all `N` nodes to all `N` nodes.
    """

    def __init__(
        self,
        edge_index: Tensor,
        num_nodes: int,
        num_layers: int,
        num_sampled_nodes: Sequence[int] | None = None,
        num_sampled_edges: Sequence[int] | None = None,
    ) -> None:
        self.num_nodes = num_nodes
        if num_sampled_nodes is None:
            self.sizes = [(num_nodes, num_nodes)] * num_layers
        else:
            counts = _check_counts(edge_index, num_nodes, num_layers, num_sampled_nodes)
            _check_edge_counts(edge_index, num_sampled_edges)
            self.sizes = [
                (sum(counts[: num_layers - layer + 1]), sum(counts[: num_layers - layer]))
                for layer in range(num_layers)
            ]
        src, dst = edge_index[0], edge_index[1]
        self.crow = ops.group_ptr(dst, num_nodes)
        # what the host needs, read back at once (on a GPU each read waits for the device):
        # whether the edges come sorted by destination (NeighborLoader's do), each layer's
        # edge count and its largest source (which must lie inside the layer's inputs)
        n_outs = [n_out for _, n_out in self.sizes]
        probes = [self.crow[n_out] for n_out in n_outs]
        if num_sampled_nodes is not None and src.numel():
            probes += [torch.where(dst < n_out, src, -1).max() for n_out in n_outs]
        in_order = (dst[1:] >= dst[:-1]).all() if dst.numel() > 1 else dst.new_ones(())
        first, *found = torch.stack([in_order.long(), *probes]).tolist()
        perm = None if first else ops.sort_groups(dst, num_nodes)[0]
        self.col = src if perm is None else src[perm]
        self.row = dst if perm is None else dst[perm]
        self.in_degree = self.crow[1:] - self.crow[:-1]
        self.nnz = found[:num_layers]
        for layer, top in enumerate(found[num_layers:]):
            n_in = self.sizes[layer][0]
            if top >= n_in:
                raise ValueError(
                    f"edge source {top} >= {n_in} input nodes of layer {layer}: edges/nodes are "
                    "not in NeighborLoader hop order; call the model without num_sampled_nodes"
                )

    def edges(self, layer: int) -> tuple[int, int, int]:
        """(n_in, n_out, nnz) of `layer` (its edges checked to stay inside its inputs)."""
        n_in, n_out = self.sizes[layer]
        return n_in, n_out, self.nnz[layer]

    def adjacency(self, layer: int, values: Tensor) -> CSR:
        """The `[n_out, n_in]` CSR of `layer` with per-edge `values` (in CSR order)."""
        n_in, n_out, nnz = self.edges(layer)
        return CSR(self.crow[: n_out + 1], self.col[:nnz], values[:nnz], self.row[:nnz], n_in)

    def edge_index(self, layer: int) -> Tensor:
        """COO `[2, nnz]` (src, dst) of `layer`, for convolutions that need edge lists (GAT)."""
        _, _, nnz = self.edges(layer)
        return torch.stack([self.col[:nnz], self.row[:nnz]])

    def mean_values(self) -> Tensor:
        """Per-edge weights 1/in-degree(dst): the CSR product is then the neighbour mean."""
        inv = 1.0 / self.in_degree.clamp(min=1).to(torch.float32)
        return inv[self.row]

    def gcn_values(self) -> tuple[Tensor, Tensor]:
        """GCN weights deg^-1/2(src) deg^-1/2(dst) with self loops, and the self-loop weights.

        Degrees come from the whole sampled batch, so trimmed and untrimmed forwards agree.
        """
        dinv = (self.in_degree + 1).to(torch.float32).rsqrt()
        return dinv[self.col] * dinv[self.row], dinv * dinv


def range_start(ids: Tensor | None) -> int | None:
    """`ids[0]` if `ids` is the range ids[0], ids[0] + 1, ... (then rows are a slice), else None."""
    if ids is None or not ids.numel():
        return None
    start = int(ids[0])
    if int(ids[-1]) - start + 1 != ids.numel() or not bool((ids[1:] > ids[:-1]).all()):
        return None
    return start


class SplitRows:
    """Source rows `[head; tail]` read as one table without concatenating them: a rank's own
    rows where they lie (its shard, e.g. memory-mapped input features) and the rows it fetched.

    `Block.mean` and `Block.targets` read both parts in place (targets are in `head`); layers
    that need one tensor call `whole()`."""

    def __init__(self, head: Tensor, tail: Tensor) -> None:
        if head.shape[1:] != tail.shape[1:]:
            raise ValueError(f"row shapes differ: {list(head.shape)} vs {list(tail.shape)}")
        self.head, self.tail = head, tail

    def whole(self) -> Tensor:
        return torch.cat([self.head, self.tail])


def whole(h: Tensor | SplitRows) -> Tensor:
    """`h` as one tensor (split rows concatenated)."""
    return h.whole() if isinstance(h, SplitRows) else h


class Block:
    """One layer-wise inference step: `n_dst` target nodes fed by `n_src` source rows.

    `crow` [n_dst + 1] / `col` are the targets' in-edges in CSR (destination rows, source row
    positions). When sources and targets share a node type, `dst` [n_dst] gives the targets' own
    rows among the sources (None: the first `n_dst` rows, DGL's block convention), so the root
    term and GAT's self-loops read them; heterogeneous layers get the targets' rows separately.
    The source rows may be many more than the block reads (layer-wise inference passes every row
    it fetched for the layer, so nothing is copied per chunk): layers aggregate before they
    transform, or `compact()` first. `src_degree` holds every source's in-degree in the FULL
    graph (GCN's normalisation; None for models without it): a target's in-edges are all in the
    block, but a source's are not. `dst_host`: a host copy of a `dst` held on a GPU, which
    the test for consecutive rows reads instead (reading `dst` there waits for the device).
    """

    def __init__(
        self,
        crow: Tensor,
        col: Tensor,
        n_src: int,
        src_degree: Tensor | None = None,
        dst: Tensor | None = None,
        dst_host: Tensor | None = None,
    ) -> None:
        self.crow, self.col, self.n_src, self.src_degree = crow, col, n_src, src_degree
        self.n_dst = crow.numel() - 1
        self.dst = dst
        self._row: Tensor | None = None
        self._dst_start = range_start(dst if dst_host is None else dst_host)

    @property
    def row(self) -> Tensor:
        """Each edge's target row (built on first use: the mean path never needs it)."""
        if self._row is None:
            counts = self.crow[1:] - self.crow[:-1]
            self._row = torch.repeat_interleave(counts, output_size=self.col.numel())
        return self._row

    def mean(self, h: Tensor | SplitRows, out: Tensor | None = None) -> Tensor:
        """Each target's mean over its in-neighbours' rows of `h` (float32), into `out`
        ([n_dst, width], any contents) when given: no per-edge weights or temporaries."""
        head, tail = (h.head, h.tail) if isinstance(h, SplitRows) else (h, h[:0])
        if head.dtype != torch.float32 or tail.dtype != torch.float32:
            raise ValueError(f"node features must be float32, got {head.dtype}")
        if out is None:
            out = head.new_empty(self.n_dst, head.size(1))
        return ops.csr_mean(self.crow, self.col, head, tail, out)

    def targets(self, h: Tensor | SplitRows) -> Tensor:
        """The targets' own rows of the source rows `h` (a view when they are consecutive;
        of `h.head` for split rows, which holds the targets)."""
        if isinstance(h, SplitRows):  # the targets are a rank's own rows: in the head
            last = self.n_dst if self.dst is None else int(self.dst.max()) + 1
            if last > h.head.size(0):
                raise ValueError(f"block targets reach row {last - 1} past the split's head")
            h = h.head
        if self.dst is None:
            return h[: self.n_dst]
        if self._dst_start is not None:
            return h[self._dst_start : self._dst_start + self.n_dst]
        return h.index_select(0, self.dst)  # a row gather ~5x faster than h[self.dst]

    def compact(self) -> tuple[Tensor, Block]:
        """(the source positions this block reads, targets first; the block over just them),
        for layers that transform every source row they are given (GAT)."""
        device = self.col.device
        first = torch.arange(self.n_dst, device=device) if self.dst is None else self.dst
        pos = torch.full((self.n_src,), -1, dtype=torch.long, device=device)
        pos[first] = torch.arange(self.n_dst, device=device)
        rest = torch.unique(self.col[pos[self.col] < 0])
        pos[rest] = self.n_dst + torch.arange(rest.numel(), device=device)
        src = torch.cat([first, rest])
        degree = None if self.src_degree is None else self.src_degree[src]
        return src, Block(self.crow, pos[self.col], src.numel(), degree)

    def gcn_adjacency(self) -> tuple[CSR, Tensor]:
        """GCN's CSR (deg^-1/2(src) deg^-1/2(dst), full-graph degrees + 1) and self weights."""
        if self.src_degree is None:
            raise ValueError("GCN inference needs the full-graph in-degree of every source row")
        dinv_dst = (self.targets(self.src_degree).to(torch.float32) + 1).rsqrt()
        dinv_col = (self.src_degree[self.col].to(torch.float32) + 1).rsqrt()
        adj = CSR(self.crow, self.col, dinv_col * dinv_dst[self.row], self.row, self.n_src)
        return adj, dinv_dst * dinv_dst

    def edge_index(self) -> Tensor:
        """COO `[2, nnz]` (source row, target row), for edge-list convolutions (GAT)."""
        return torch.stack([self.col, self.row])


def _check_counts(
    edge_index: Tensor, num_nodes: int, num_layers: int, counts: Sequence[int]
) -> list[int]:
    counts = [int(c) for c in counts]
    if len(counts) != num_layers + 1:
        raise ValueError(
            f"num_sampled_nodes has {len(counts) - 1} hops after the seeds for a "
            f"{num_layers}-layer model; sample one hop per layer (len == num_layers + 1)"
        )
    if sum(counts) != num_nodes:
        raise ValueError(f"num_sampled_nodes sums to {sum(counts)} but x has {num_nodes} rows")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"edge_index must be [2, E], got {list(edge_index.shape)}")
    return counts


def _check_edge_counts(edge_index: Tensor, counts: Sequence[int] | None) -> None:
    if counts is not None and sum(int(c) for c in counts) != edge_index.size(1):
        raise ValueError(
            f"num_sampled_edges sums to {sum(counts)} but edge_index has {edge_index.size(1)} edges"
        )


class SAGELayer(nn.Module):
    """GraphSAGE (mean): `W_n mean_{j->i} h_j + W_r h_i + b`."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.lin_neigh = nn.Linear(in_channels, out_channels, bias=True)
        self.lin_root = nn.Linear(in_channels, out_channels, bias=False)

    def forward(self, h: Tensor, graph: SampledGraph, layer: int, values: Tensor) -> Tensor:
        _, n_out, _ = graph.edges(layer)
        return self.propagate(h, graph.adjacency(layer, values), n_out)

    @property
    def narrows(self) -> bool:
        """Whether the layer shrinks the width (then projecting before aggregating is cheaper)."""
        return self.lin_neigh.out_features < self.lin_neigh.in_features

    def infer(
        self, h: Tensor | tuple[Tensor, Tensor], block: Block, out: Tensor | None = None
    ) -> Tensor:
        """The block's targets from the source rows `h`, or from `(h W_root^T, h W_neigh^T)`
        (`narrows`: both projections computed once for every chunk, see
        `SampledGNN.inference_projection`); else it aggregates first, so only the rows the
        block reads are used. Written into `out` when given ([n_dst, out_channels]): the
        products accumulate there, so a chunk allocates at most its aggregate; `out` may be
        the targets' own rows of `h W_root^T` (layer-wise inference's buffer), added to.
        Projections may carry zero columns past `out_channels` (whole cache lines): the result
        has them too, the bias goes to the leading ones."""
        if isinstance(h, tuple):
            root, neigh = h
            out = root.new_empty(block.n_dst, root.size(1)) if out is None else out
            own = block.targets(root)
            if own.data_ptr() == out.data_ptr():  # `out` holds the root rows: add to them
                out.add_(block.mean(neigh))
            else:
                block.mean(neigh, out).add_(own)
            bias = self.lin_neigh.bias
            out[:, : bias.numel()].add_(bias)
            return out
        if out is None:
            out = self.lin_neigh.weight.new_empty(block.n_dst, self.lin_neigh.out_features)
        torch.addmm(self.lin_neigh.bias, block.mean(h), self.lin_neigh.weight.t(), out=out)
        return out.addmm_(block.targets(h), self.lin_root.weight.t())

    def propagate(self, h: Tensor, adj: CSR, n_out: int) -> Tensor:
        """The layer on the first `n_out` rows of `h`, neighbours given by `adj`."""
        root = self.lin_root(h[:n_out] if n_out < h.size(0) else h)
        w, b = self.lin_neigh.weight, self.lin_neigh.bias
        if w.size(0) < w.size(1):  # narrower output: project, then aggregate fewer columns
            neigh = aggregate(adj, h @ w.t()) + b
        else:
            neigh = F.linear(aggregate(adj, h), w, b)
        return neigh + root


class GCNLayer(nn.Module):
    """GCN: `sum_{j->i} h_j W / sqrt(d_i d_j) + h_i W / d_i + b` with d = in-degree + 1."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(
        self, h: Tensor, graph: SampledGraph, layer: int, values: tuple[Tensor, Tensor]
    ) -> Tensor:
        edge_w, self_w = values
        _, n_out, _ = graph.edges(layer)
        return self.propagate(h, graph.adjacency(layer, edge_w), self_w[:n_out])

    def infer(self, h: Tensor | SplitRows, block: Block, out: Tensor | None = None) -> Tensor:
        """The block's targets: `(A h + self_w h_dst) W + b` (aggregating first, as SAGE);
        `out` is ignored (a fresh tensor is returned)."""
        h = whole(h)
        adj, self_w = block.gcn_adjacency()
        return self.lin(aggregate(adj, h) + block.targets(h) * self_w[:, None]) + self.bias

    def propagate(self, h: Tensor, adj: CSR, self_w: Tensor) -> Tensor:
        """The layer on the first `len(self_w)` rows of `h` (`self_w`: their self-loop weights)."""
        hw = self.lin(h)
        out = aggregate(adj, hw)
        return out + hw[: self_w.numel()] * self_w[:, None] + self.bias


class GATLayer(nn.Module):
    """GAT via PyG's `GATConv` on the trimmed edge list; only the first `n_out` rows are kept."""

    def __init__(self, in_channels: int, out_channels: int, heads: int, last: bool) -> None:
        super().__init__()
        from torch_geometric.nn import GATConv

        if last:
            self.conv = GATConv(in_channels, out_channels, heads=1, concat=False)
        else:
            self.conv = GATConv(in_channels, out_channels // heads, heads=heads, concat=True)

    def forward(self, h: Tensor, graph: SampledGraph, layer: int, values: None) -> Tensor:
        _, n_out, _ = graph.edges(layer)
        return self.conv(h, graph.edge_index(layer))[:n_out]

    def infer(self, h: Tensor | SplitRows, block: Block, out: Tensor | None = None) -> Tensor:
        """Attention over each target's full in-neighbourhood (plus its self-loop); `out` is
        ignored (a fresh tensor is returned)."""
        h = whole(h)
        src, local = block.compact()
        return self.conv(h[src], local.edge_index())[: block.n_dst]


class SampledGNN(nn.Module):
    """A stack of SAGE / GCN / GAT layers with ReLU + dropout between them (none after the last).

    See the module docstring for the forward contract (all rows, or seed rows when trimmed).
    """

    def __init__(
        self,
        kind: str,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int,
        dropout: float = 0.0,
        heads: int = 1,
    ) -> None:
        super().__init__()
        if kind not in ("sage", "gcn", "gat"):
            raise ValueError(f"model kind {kind!r}: expected sage, gcn or gat")
        if kind == "gat" and hidden_channels % heads:
            raise ValueError(
                f"model.hidden_channels={hidden_channels} is not divisible by model.heads={heads}"
            )
        self.kind, self.num_layers, self.dropout = kind, num_layers, dropout
        ops.warm()
        self.dims = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.layers = nn.ModuleList(
            self._layer(self.dims[i], self.dims[i + 1], heads, i == num_layers - 1)
            for i in range(num_layers)
        )

    @classmethod
    def from_config(cls, cfg: ModelConfig, in_channels: int, out_channels: int) -> SampledGNN:
        """The `model.name=sage|gcn|gat` builder (`app.model.registry`)."""
        return cls(
            cfg.name,
            in_channels,
            cfg.hidden_channels,
            out_channels,
            cfg.num_layers,
            cfg.dropout,
            cfg.heads,
        )

    def _layer(self, cin: int, cout: int, heads: int, last: bool) -> nn.Module:
        if self.kind == "sage":
            return SAGELayer(cin, cout)
        if self.kind == "gcn":
            return GCNLayer(cin, cout)
        return GATLayer(cin, cout, heads, last)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        num_sampled_nodes: Sequence[int] | None = None,
        num_sampled_edges: Sequence[int] | None = None,
    ) -> Tensor:
        graph = SampledGraph(
            edge_index, x.size(0), self.num_layers, num_sampled_nodes, num_sampled_edges
        )
        values = self._edge_values(graph)
        h = x.float()  # float16 features (dataset.feature_dtype) computed in float32
        for i, layer in enumerate(self.layers):
            h = layer(h, graph, i, values)
            if i < self.num_layers - 1:
                h = ops.dropout(F.relu(h), self.dropout, self.training)
        return h

    @property
    def num_inference_layers(self) -> int:
        return self.num_layers

    @property
    def needs_degree(self) -> bool:
        """Whether `inference_layer` reads `Block.src_degree` (GCN's normalisation)."""
        return self.kind == "gcn"

    def inference_width(self, layer: int) -> int:
        """Output channels of `layer`."""
        return self.dims[layer + 1]

    def inference_projection(self, layer: int) -> tuple[Tensor, Tensor] | None:
        """`(W_root, W_neigh)` when layer `layer` reads `(h W_root^T, h W_neigh^T)` instead of
        `h` (a SAGE layer that `narrows`: fewer columns to aggregate and to fetch — layer-wise
        inference has the layer before project each chunk as it computes it, so `h` is never
        stored whole); None: the layer reads `h`."""
        lyr = self.layers[layer]
        if isinstance(lyr, SAGELayer) and lyr.narrows:
            return lyr.lin_root.weight, lyr.lin_neigh.weight
        return None

    def inference_layer(
        self,
        layer: int,
        h_src: Tensor | tuple[Tensor, Tensor],
        block: Block,
        out: Tensor | None = None,
    ) -> Tensor:
        """Layer `layer` of the block's targets from layer `layer - 1` rows (eval semantics;
        `h_src`: `(h W_root^T, h W_neigh^T)` for a layer with an `inference_projection`). With
        `out` ([n_dst, width]) a layer that can writes its rows there (SAGE) and returns `out`;
        others return a fresh tensor."""
        h = self.layers[layer].infer(h_src, block, out)
        return h.relu_() if layer < self.num_layers - 1 else h

    def _edge_values(self, graph: SampledGraph) -> Tensor | tuple[Tensor, Tensor] | None:
        if self.kind == "sage":
            return graph.mean_values()
        if self.kind == "gcn":
            return graph.gcn_values()
        return None


class MLP(nn.Module):
    """Graph-agnostic baseline with the same forward contract (edges are ignored)."""

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        dims = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.lins = nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(num_layers))
        self.dropout = dropout
        self.needs_degree = False

    @classmethod
    def from_config(cls, cfg: ModelConfig, in_channels: int, out_channels: int) -> MLP:
        """The `model.name=mlp` builder (`app.model.registry`)."""
        return cls(in_channels, cfg.hidden_channels, out_channels, cfg.num_layers, cfg.dropout)

    @property
    def num_inference_layers(self) -> int:
        return len(self.lins)

    def inference_width(self, layer: int) -> int:
        return self.lins[layer].out_features

    def inference_projection(self, layer: int) -> None:
        """No layer reads projections: a linear layer reads its own row only."""
        return None

    def inference_layer(
        self, layer: int, h_src: Tensor, block: Block, out: Tensor | None = None
    ) -> Tensor:
        """Layer `layer` of the block's targets (the first `n_dst` rows; edges are ignored;
        `out` too: a fresh tensor is returned)."""
        h = self.lins[layer](block.targets(h_src))
        return F.relu(h) if layer < len(self.lins) - 1 else h

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor | None = None,
        num_sampled_nodes: Sequence[int] | None = None,
        num_sampled_edges: Sequence[int] | None = None,
    ) -> Tensor:
        h = x if num_sampled_nodes is None else x[: int(num_sampled_nodes[0])]
        h = h.float()  # float16 features (dataset.feature_dtype) computed in float32
        for i, lin in enumerate(self.lins):
            h = lin(h)
            if i < len(self.lins) - 1:
                h = ops.dropout(F.relu(h), self.dropout, self.training)
        return h
