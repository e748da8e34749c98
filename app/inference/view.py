"""Graph views for layer-wise inference: what one rank computes, and where rows live.

A `GraphView` is the same object whether the graph is local (one process, one "partition" that
is the whole graph) or this rank's share of a partitioned graph; `app.inference.layerwise` is
written once over it. Homogeneous graphs use PyG's homogeneous-as-hetero names: node type
`_N`, edge type `(_N, _E, _N)`.

For every node type the view lists `mine`: the sorted global ids this rank computes (a
partition's owned nodes, split contiguously between the node's trainers), and for every edge
type the in-edges of those nodes as a CSR (`crow` over `mine[dst]`, `col` global source ids).
Partitions store every in-edge of an owned node (edges belong to their destination's part), so
these are full neighbourhoods. Layer tables (`new_table`) are plain tensors locally and
`DistTensor`s (rows sharded by the partition book) when distributed; both are read with
`table[ids]` and written with `table[ids] = rows`, which is all the algorithm uses.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from app.contract import EVAL_SPLITS
from app.distributed.context import DistContext
from app.distributed.tensor import DistTensor, shard_ids, unregister
from app.model.ops import in_csr
from app.partition.reader import PartitionData

NODE = "_N"
EDGE = (NODE, "_E", NODE)
EdgeType = tuple[str, str, str]
_ROUNDS = itertools.count()  # distinct DistTensor names per evaluation (same order on all ranks)


class LocalBackend:
    """One process: tables are dense tensors, collectives are no-ops."""

    holds_all = True  # every row of every table, in id order; no other process reads them

    def local_ids(self, ntype: str, num_rows: int) -> Tensor:
        """The ids whose rows this process holds, in shard order: all of them."""
        return torch.arange(num_rows)

    def owners(self, ntype: str, ids: Tensor) -> Tensor:
        return torch.zeros_like(ids)

    def new_table(self, name: str, ntype: str, num_rows: int, local: Tensor) -> Tensor:
        """The table whose rows are `local` (every row: one process holds the whole graph)."""
        return local

    def drop(self, table: Any) -> None:
        """Nothing to release: the tensor is freed with its last reference."""

    def barrier(self) -> None:
        """A single process never waits for peers."""

    def all_reduce(self, values: Tensor) -> Tensor:
        return values


class DistBackend:
    """Several trainers: tables are `DistTensor`s; collectives use the trainers' process group.

    Every trainer runs the same sequence of `new_table` / `barrier` / `all_reduce` calls, so
    uneven partitions (or a trainer with no nodes) cannot make one wait for another forever.
    """

    holds_all = False  # a shard per partition, in host memory, read by the other trainers

    def __init__(self, books: dict[str, Any], part_id: int, is_owner: bool) -> None:
        if not torch.distributed.is_initialized():
            raise RuntimeError(
                "distributed layer-wise inference needs the trainers' process group: call "
                "torch.distributed.init_process_group before building the view"
            )
        self.books, self.part_id, self.is_owner = books, part_id, is_owner

    def local_ids(self, ntype: str, num_rows: int) -> Tensor:
        """The ids whose rows this process holds, in shard order: its partition's nodes on the
        node's first trainer (the owner of every table's shard), none elsewhere."""
        if not self.is_owner:
            return torch.empty(0, dtype=torch.long)
        return shard_ids(self.books[ntype], self.part_id, num_rows)[0]  # as its DistTensors'

    def owners(self, ntype: str, ids: Tensor) -> Tensor:
        return self.books[ntype].partition_of(ids)

    def new_table(self, name: str, ntype: str, num_rows: int, local: Tensor) -> DistTensor:
        """A `DistTensor` whose shard is `local` itself (the rows `local_ids` lists; the caller
        writes them), so the layer that fills it and the next that reads it copy nothing."""
        return DistTensor(
            (num_rows, int(local.shape[1])),
            torch.float32,
            name,
            book=self.books[ntype],
            part_id=self.part_id,
            is_owner=self.is_owner,
            init_func=lambda shape, dtype: local,  # called on the owner only
        )

    def drop(self, table: Any) -> None:
        if isinstance(table, DistTensor) and table.is_owner:
            unregister(table.name)

    def barrier(self) -> None:
        torch.distributed.barrier()

    def all_reduce(self, values: Tensor) -> Tensor:
        torch.distributed.all_reduce(values)
        return values


@dataclass
class GraphView:
    """One rank's share of a graph (see the module docstring).

    `inputs`: layer-0 rows per featured node type (tensor or DistTensor; featureless types get
    theirs from the model's embeddings). `degree`: full-graph in-degree per edge type whose
    source and destination types agree (GCN). `labels`: `y` of `mine[target]`. `splits`: global
    target ids per evaluation split (any superset of this rank's share; filtered by `mine`).
    """

    num_nodes: dict[str, int]
    mine: dict[str, Tensor]
    edges: dict[EdgeType, tuple[Tensor, Tensor]]
    inputs: dict[str, Any]
    degree: dict[EdgeType, Any]
    target: str
    labels: Tensor
    splits: dict[str, Tensor]
    backend: LocalBackend | DistBackend
    is_hetero: bool = False
    owned_tables: list[Any] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)  # what layer-wise runs reuse

    @property
    def node_types(self) -> list[str]:
        return list(self.num_nodes)

    def table_name(self, round_: int, layer: int, ntype: str) -> str:
        return f"layerwise/{round_}/{layer}/{ntype}"

    def next_round(self) -> int:
        return next(_ROUNDS)

    def close(self) -> None:
        """Release the input tables this view created (distributed: their registry names)."""
        for table in self.owned_tables:
            self.backend.drop(table)
        self.owned_tables.clear()


def _csr(edge_index: Tensor, num_src: int, num_dst: int) -> tuple[Tensor, Tensor]:
    """The in-edge CSR of `edge_index` (sources in int32 where ids fit; see `in_csr`)."""
    return in_csr(edge_index, num_src, num_dst)


def _labelled_type(data: HeteroData) -> str:
    """The node type with labels (node classification), else the first (link prediction)."""
    labelled = [t for t in data.node_types if "y" in data[t] and "val_mask" in data[t]]
    if len(labelled) > 1:
        raise ValueError(f"expected one node type with y and val_mask, found {labelled}")
    return labelled[0] if labelled else data.node_types[0]


def _labels(store: Any) -> Tensor:
    return store.y.view(-1) if "y" in store else torch.empty(0, dtype=torch.long)


def _mask_ids(store: Any) -> dict[str, Tensor]:
    empty = torch.empty(0, dtype=torch.long)
    return {
        s: store[f"{s}_mask"].nonzero().view(-1) if f"{s}_mask" in store else empty
        for s in EVAL_SPLITS
    }


def local_view(
    data: Data | HeteroData, edges: tuple[Tensor, Tensor] | None = None, x: Tensor | None = None
) -> GraphView:
    """The whole graph in this process (single-process training, or a test's reference).

    A homogeneous graph's view may take what a caller already holds instead of building it:
    `edges`, its in-edge CSR `(crow in host memory, col anywhere)` in `in_csr`'s stable order
    (a sampler's CSC is: to_csc sorts the same way), and `x`, its float32 features anywhere
    (e.g. already on the GPU), so the first evaluation neither sorts the edges nor copies them
    nor the features to the device."""
    if isinstance(data, HeteroData):
        target = _labelled_type(data)
        nums = {t: int(data[t].num_nodes) for t in data.node_types}
        return GraphView(
            num_nodes=nums,
            mine={t: torch.arange(n) for t, n in nums.items()},
            edges={
                et: _csr(data[et].edge_index, nums[et[0]], nums[et[-1]]) for et in data.edge_types
            },
            inputs={t: data[t].x.float() for t in data.node_types if "x" in data[t]},
            degree={},
            target=target,
            labels=_labels(data[target]),
            splits=_mask_ids(data[target]),
            backend=LocalBackend(),
            is_hetero=True,
        )
    n = int(data.num_nodes)
    crow, col = _csr(data.edge_index, n, n) if edges is None else edges
    if crow.numel() != n + 1 or col.numel() != data.edge_index.size(1):
        raise ValueError(
            f"edges: a CSR of {crow.numel() - 1} nodes and {col.numel()} edges, but the graph "
            f"has {n} nodes and {data.edge_index.size(1)} edges"
        )
    return GraphView(
        num_nodes={NODE: n},
        mine={NODE: torch.arange(n)},
        edges={EDGE: (crow, col)},
        inputs={NODE: data.x.float() if x is None else x},
        degree={EDGE: (crow[1:] - crow[:-1]).to(torch.float32).unsqueeze(1)},
        target=NODE,
        labels=_labels(data),
        splits=_mask_ids(data),
        backend=LocalBackend(),
    )


def _share(owned: Tensor, local_rank: int, procs_per_node: int) -> slice:
    """The contiguous slice of a part's owned nodes that trainer `local_rank` computes."""
    bounds = torch.linspace(0, owned.numel(), procs_per_node + 1).round().long().tolist()
    return slice(bounds[local_rank], bounds[local_rank + 1])


def _owned_csr(graph: dict[str, Tensor], ids: Tensor) -> tuple[Tensor, Tensor]:
    """In-edges of `ids` (sorted owned nodes) from a part's CSC over global destination ids,
    in the partition's index dtype (int32 where ids fit: a view of its columns, not a copy)."""
    colptr, row = graph["colptr"], graph["row"]
    if ids.numel() == 0:
        return torch.zeros(1, dtype=torch.long), torch.empty(0, dtype=torch.long)
    starts = colptr[ids]
    crow = torch.cat([starts, colptr[ids[-1] + 1].view(1)]) - starts[0]
    col = row[int(starts[0]) : int(colptr[ids[-1] + 1])]
    if col.numel() != int(crow[-1]):
        raise ValueError("partition graph: owned columns are not contiguous in CSC order")
    return crow, col


def _input_table(backend: DistBackend, name: str, ntype: str, num_rows: int, rows: Tensor) -> Any:
    """A layer-0 `DistTensor` whose shard (on the node's first trainer only) is the owned
    `rows` themselves (1-D rows become one column); other trainers of the node copy nothing."""

    def init(shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
        if shape[0] != rows.shape[0]:
            raise ValueError(
                f"{name}: the partition book gives part {backend.part_id} {shape[0]} rows but "
                f"node_feats.pt holds {rows.shape[0]}; re-partition the graph"
            )
        # no copy when the rows already have the dtype: inputs are only read (the partition's
        # memory-mapped features, pages the training loaders share), never written
        return torch.as_tensor(rows).to(dtype).reshape(shape)

    width = int(rows.shape[1]) if rows.dim() > 1 else 1
    return DistTensor(
        (num_rows, width),
        torch.float32,
        name,
        book=backend.books[ntype],
        part_id=backend.part_id,
        is_owner=backend.is_owner,
        init_func=init,
    )


def partition_view(part: PartitionData, ctx: DistContext) -> GraphView:
    """This trainer's share of a loaded partition (`ctx`: its `DistContext`; RPC is up).

    Creates the layer-0 `DistTensor`s (owned features, in-degrees) on the node's first trainer;
    every trainer of the job must build its view before any evaluates. Call `close()` at exit.
    """
    hetero = part.is_hetero
    types = list(part.meta["node_types"]) if hetero else [NODE]
    books = part.book if hetero else {NODE: part.book}
    backend = DistBackend(books, ctx.partition_idx, ctx.local_rank == 0)
    nums = part.meta["num_nodes"]
    num_nodes = {t: int(nums[t] if hetero else nums) for t in types}
    feats = {t: part.node_feats[t] if hetero else part.node_feats for t in types}
    share = {t: _share(feats[t]["global_id"], ctx.local_rank, ctx.procs_per_node) for t in types}
    mine = {t: feats[t]["global_id"][share[t]].long() for t in types}
    graphs = part.graph if hetero else {EDGE: part.graph}
    edges = {tuple(et): _owned_csr(g, mine[et[-1]]) for et, g in graphs.items()}
    view = GraphView(
        num_nodes=num_nodes,
        mine=mine,
        edges=edges,
        inputs={},
        degree={},
        target=NODE,
        labels=torch.empty(0, dtype=torch.long),
        splits={},
        backend=backend,
        is_hetero=hetero,
    )
    for t in types:
        if "x" in feats[t]["feats"]:
            # layer-wise inference computes in float32: float16 features are widened here (the
            # table then costs float32 bytes; train.eval_mode=sampled reads them narrow)
            x = feats[t]["feats"]["x"].float()
            view.inputs[t] = _input_table(backend, f"layerwise/x/{t}", t, num_nodes[t], x)
            view.owned_tables.append(view.inputs[t])
    if not hetero:
        owned = feats[NODE]["global_id"].long()
        colptr = part.graph["colptr"]
        deg = (colptr[owned + 1] - colptr[owned]).float()
        view.degree[EDGE] = _input_table(backend, "layerwise/degree", NODE, num_nodes[NODE], deg)
        view.owned_tables.append(view.degree[EDGE])
    _set_labels(view, part, feats, share, types)
    return view


def _set_labels(
    view: GraphView, part: PartitionData, feats: dict, share: dict, types: list
) -> None:
    labelled = [t for t in types if "y" in feats[t]["feats"]]
    if len(labelled) > 1:
        raise ValueError(f"{part.root}: expected one node type with labels `y`, found {labelled}")
    view.target = target = labelled[0] if labelled else types[0]  # none: link prediction
    if labelled:
        view.labels = feats[target]["feats"]["y"].view(-1)[share[target]]
    empty = torch.empty(0, dtype=torch.long)
    for split in EVAL_SPLITS:
        ids = part.seeds.get(split, empty)
        if isinstance(ids, dict):
            ids = ids.get(target, empty)
        view.splits[split] = torch.as_tensor(ids).long()
