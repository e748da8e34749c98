"""`LocalGraphStore`: one partition's topology (CSC over GLOBAL ids) behind PyG's GraphStore API.

Each edge type keeps the partition's owned in-edges as `colptr` (indexable by global destination
id), `row` (global source ids) and `edge_id` (global edge ids), exactly as the partition files
store them and memory-mapped from disk: the processes of one node share the same pages, and
nothing here copies them. The node/edge maps (id → partition) route requests to owners.

Two things serve temporal sampling. `node_time(type)` is the time of EVERY node of a type
(owned and halo: the kernel reads `node_time[row[p]]`), memory-mapped from the partition's
`node_time.pt`; partitions without it refuse temporal sampling with a one-line fix. And a
temporal partition stores each column sorted by source time (PyG's layout), whereas the local
sampler keeps a column in edge-id order: such columns are put back in edge-id order on load (a
private copy of `row` / `edge_id`), so seeded samples stay equal to the single-machine ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr, EdgeLayout, GraphStore

from app.partition.book import DictPartitionBook, PartitionBook
from app.partition.pyg import read_labels
from app.partition.reader import (
    REPARTITION_HINT,
    PartitionData,
    csc_pointer,
    load_partition,
    map_files,
    torch_load,
)

EdgeType = tuple[str, str, str]
Key = EdgeType | None


class LocalGraphStore(GraphStore):
    """Topology of the local partition plus the id → partition books of the whole graph."""

    def __init__(self) -> None:
        super().__init__()
        self._csc: dict[Key, dict[str, Tensor]] = {}
        self._attrs: dict[Key, EdgeAttr] = {}
        self._np: dict[Key, tuple[np.ndarray, ...]] = {}
        self.num_partitions = 1
        self.partition_idx = 0
        self.node_pb: PartitionBook | dict[str, PartitionBook] | None = None
        self.edge_pb: Tensor | dict[EdgeType, Tensor] | None = None
        self.meta: dict[str, Any] = {"is_hetero": False}
        self.is_sorted = True
        self.root: Path | None = None  # partition folder (for messages)
        self.labels: Tensor | dict[str, Tensor] | None = None  # label file's (PyG's `labels`)
        self._time: dict[str | None, Tensor] = {}
        self._time_np: dict[str | None, np.ndarray] = {}

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_partition(cls, root: str | Path, pid: int) -> LocalGraphStore:
        """Load part `pid` of the partition at `root` (memory-mapped, no copies)."""
        return cls.from_partition_data(load_partition(root, pid))

    @classmethod
    def from_partition_data(cls, part: PartitionData) -> LocalGraphStore:
        store = cls()
        store.num_partitions, store.partition_idx, store.meta = (
            part.num_parts,
            part.index,
            part.meta,
        )
        store.node_pb = part.book
        store.edge_pb = load_edge_map(part)
        store.root = part.root
        store.labels = read_labels(part.root)
        items = part.graph.items() if part.is_hetero else [(None, part.graph)]
        for key, g in items:
            size = tuple(int(s) for s in g["size"])
            store._add(key, g["colptr"], *_edge_id_order(g), size)
        if part.node_time is not None:
            store._time = part.node_time if part.is_hetero else {None: part.node_time}
        return store

    @classmethod
    def from_data(
        cls, edge_id: Tensor, edge_index: Tensor, num_nodes: int, is_sorted: bool = False
    ) -> LocalGraphStore:
        """A one-partition store over a whole homogeneous graph (global ids = local ids)."""
        store = cls()
        store._add(None, *_to_csc(edge_index, edge_id, num_nodes, is_sorted), (num_nodes,) * 2)
        store.node_pb = DictPartitionBook(torch.zeros(num_nodes, dtype=torch.int64), 1)
        store.edge_pb = torch.zeros(edge_index.size(1), dtype=torch.int64)
        store.meta = {"num_parts": 1, "is_hetero": False}
        return store

    @classmethod
    def from_hetero_data(
        cls,
        edge_id_dict: dict[EdgeType, Tensor],
        edge_index_dict: dict[EdgeType, Tensor],
        num_nodes_dict: dict[str, int],
        is_sorted: bool = False,
    ) -> LocalGraphStore:
        """A one-partition store over a whole heterogeneous graph."""
        store = cls()
        for et, ei in edge_index_dict.items():
            size = (num_nodes_dict[et[0]], num_nodes_dict[et[2]])
            store._add(et, *_to_csc(ei, edge_id_dict[et], size[1], is_sorted), size)
        store.node_pb = {
            t: DictPartitionBook(torch.zeros(n, dtype=torch.int64), 1)
            for t, n in num_nodes_dict.items()
        }
        store.edge_pb = {
            et: torch.zeros(ei.size(1), dtype=torch.int64) for et, ei in edge_index_dict.items()
        }
        store.meta = {
            "num_parts": 1,
            "is_hetero": True,
            "node_types": list(num_nodes_dict),
            "edge_types": list(edge_index_dict),
        }
        return store

    def _add(self, key: Key, colptr: Tensor, row: Tensor, edge_id: Tensor, size: tuple) -> None:
        self._np.pop(key, None)
        self._csc[key] = {"colptr": colptr, "row": row, "edge_id": edge_id}
        self._attrs[key] = EdgeAttr(key, EdgeLayout.CSC, is_sorted=True, size=size)

    # -- what the sampler uses ----------------------------------------------------------------

    @property
    def is_hetero(self) -> bool:
        return bool(self.meta.get("is_hetero"))

    @property
    def edge_types(self) -> list[EdgeType]:
        return [k for k in self._csc if k is not None]

    def csc(self, edge_type: Key = None) -> dict[str, Tensor]:
        """{'colptr','row','edge_id'} of one edge type (None when homogeneous)."""
        try:
            return self._csc[edge_type]
        except KeyError:
            raise KeyError(
                f"edge type {edge_type!r} not in this graph store: {list(self._csc)}"
            ) from None

    def csc_numpy(self, edge_type: Key = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(colptr, row, edge_id) as numpy views (zero-copy) for the numba kernel."""
        views = self._np.get(edge_type)
        if views is None:
            g = self.csc(edge_type)
            views = self._np[edge_type] = tuple(g[k].numpy() for k in ("colptr", "row", "edge_id"))
        return views

    def num_nodes(self, node_type: str | None = None) -> int:
        """Global node count of a type (from the CSC sizes: [N_src, N_dst] per edge type)."""
        for key, attr in self._attrs.items():
            if key is None or key[2] == node_type:
                return int(attr.size[1])
            if key[0] == node_type:
                return int(attr.size[0])
        raise KeyError(f"node type {node_type!r} is in no edge type of this graph store")

    @property
    def time_types(self) -> list[str | None]:
        """Node types with a time (homogeneous: [None] when the graph is temporal)."""
        return list(self._time)

    def node_time(self, node_type: str | None = None) -> Tensor:
        """Time of every node of a type, by global id (temporal partitions only)."""
        if node_type in self._time:
            return self._time[node_type]
        root = self.root or "this graph store"
        if not self._time:
            raise ValueError(
                f"{root} holds no node times (node_time.pt): it was written from a graph without "
                f"node `time` or by an older partitioner; partition with dataset.temporal=true "
                f"({REPARTITION_HINT}), or set sampler.time_attr=null"
            )
        raise ValueError(
            f"node type {node_type!r} has no time in {root} (types with time: "
            f"{sorted(self._time)}); temporal sampling needs a time on every sampled node type"
        )

    def node_time_numpy(self, node_type: str | None = None) -> np.ndarray:
        """`node_time` as a zero-copy numpy view for the numba kernel."""
        view = self._time_np.get(node_type)
        if view is None:
            view = self._time_np[node_type] = self.node_time(node_type).numpy()
        return view

    def owner(self, ids: np.ndarray, node_type: str | None = None) -> np.ndarray:
        """Owning partition of each global id (numpy in and out: the sampler's hot path)."""
        if self.num_partitions == 1:
            return np.full(ids.shape, self.partition_idx, np.int64)
        return owner_of(self.node_pb[node_type] if self.is_hetero else self.node_pb, ids)

    def get_partition_ids_from_nids(self, ids: Tensor, node_type: str | None = None) -> Tensor:
        """Owning partition of each global node id."""
        pb = self.node_pb[node_type] if self.is_hetero else self.node_pb
        return pb.partition_of(ids)

    def get_partition_ids_from_eids(
        self, eids: Tensor, edge_type: EdgeType | None = None
    ) -> Tensor:
        """Owning partition of each global edge id."""
        pb = self.edge_pb[edge_type] if self.is_hetero else self.edge_pb
        return pb[eids]

    # -- GraphStore API -----------------------------------------------------------------------

    def _put_edge_index(self, edge_index: Any, edge_attr: EdgeAttr) -> bool:
        if edge_attr.layout != EdgeLayout.CSC:
            raise ValueError(f"LocalGraphStore keeps CSC only, got layout {edge_attr.layout}")
        row, colptr = edge_index
        eid = torch.arange(row.numel())
        self._add(edge_attr.edge_type, colptr, row, eid, tuple(edge_attr.size or ()))
        return True

    def _get_edge_index(self, edge_attr: EdgeAttr) -> tuple[Tensor, Tensor] | None:
        """(row, colptr) for CSC (stored), (row, col) for COO, (rowptr, col) for CSR; ids are
        global, edges those this partition owns."""
        g = self._csc.get(edge_attr.edge_type)
        if g is None:
            return None
        layout = EdgeLayout(edge_attr.layout)
        if layout == EdgeLayout.CSC:
            return g["row"], g["colptr"]
        colptr, row = g["colptr"].long(), g["row"].long()
        col = torch.repeat_interleave(torch.arange(colptr.numel() - 1), colptr.diff())
        if layout == EdgeLayout.COO:
            return row, col
        order = torch.argsort(row, stable=True)
        num_src = int(self._attrs[edge_attr.edge_type].size[0])
        return csc_pointer(row[order], num_src), col[order]

    def get_global_id(self, edge_type: Key = None) -> Tensor:
        """Global ids of the edges this partition owns (PyG's name)."""
        return self.csc(edge_type)["edge_id"]

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        self._attrs.pop(edge_attr.edge_type, None)
        return self._csc.pop(edge_attr.edge_type, None) is not None

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        return list(self._attrs.values())


def owner_of(book: PartitionBook, ids: np.ndarray) -> np.ndarray:
    """`book.partition_of` on numpy ids; a dict book is a plain numpy gather (no torch overhead)."""
    node_map = getattr(book, "node_map", None)
    if node_map is not None:
        return node_map.numpy()[ids]
    return book.partition_of(torch.from_numpy(ids)).numpy()


def _edge_id_order(g: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """(row, edge_id) with every column in edge-id order, the local sampler's CSC order.

    Columns already in that order (non-temporal partitions) are returned as they are (the
    memory-mapped tensors); otherwise (a temporal partition sorts each column by source time)
    one stable sort builds the reordered copy.
    """
    row, col, edge_id = g["row"], g["col"], g["edge_id"]
    if edge_id.numel() < 2:
        return row, edge_id
    same_col = col[1:] == col[:-1]
    if not bool((same_col & (edge_id[1:] < edge_id[:-1])).any()):
        return row, edge_id
    perm = torch.sort(edge_id, stable=True).indices
    perm = perm[torch.sort(col[perm], stable=True).indices]
    return row[perm], edge_id[perm]


def load_edge_map(part: PartitionData) -> Any:
    """Edge → part map(s) of a partition (memory-mapped; by edge type when heterogeneous)."""
    maps = {t: torch_load(part.root / rel) for t, rel in map_files(part.meta, "edge_map").items()}
    return maps if part.is_hetero else maps[None]


def _to_csc(
    edge_index: Tensor, edge_id: Tensor, num_dst: int, is_sorted: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """(colptr, row, edge_id) of an edge list, sorted by destination (stable)."""
    row, col = edge_index
    if not is_sorted:
        perm = torch.argsort(col, stable=True)
        row, col, edge_id = row[perm], col[perm], edge_id[perm]
    return csc_pointer(col, num_dst), row.contiguous(), edge_id.contiguous()
