"""`GraphStoreCore`: one partition's topology (CSC over GLOBAL ids), what sampling reads.

PyG-free: a sampler process loads this and never imports torch_geometric (issue 38: PyG is a
large share of its fixed memory). PyG's `GraphStore` API over it (`put_edge_index` /
`get_edge_index` / `put_edge_id` in COO, CSR or CSC) is `app.distributed.pyg.graph_store.
LocalGraphStore`, a subclass: whatever the sampler reads, it reads from this class's state.

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

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from torch import Tensor

from app.jit import preload
from app.partition.book import PartitionBook, pyg_book
from app.partition.pyg import read_labels
from app.partition.reader import (
    REPARTITION_HINT,
    PartitionData,
    load_partition,
    map_files,
    torch_load,
)

EdgeType = tuple[str, str, str]
Key = EdgeType | None


@dataclass(frozen=True)
class EdgeSpec:
    """What a store knows of one stored layout of an edge type (PyG's `EdgeAttr` fields,
    without PyG: the PyG face converts it, and keeps PyG's own for the layouts put)."""

    edge_type: Key
    layout: str  # "coo", "csr" or "csc"
    is_sorted: bool = False
    size: tuple[int, int] | None = None


G = TypeVar("G", bound="GraphStoreCore")


class GraphStoreCore:
    """Topology of the local partition plus the id → partition books of the whole graph."""

    def __init__(self) -> None:
        self._csc: dict[Key, dict[str, Tensor]] = {}  # the sampler's CSC per edge type
        self._edge_attr: dict[tuple[Key, str], Any] = {}  # EdgeSpec (PyG's EdgeAttr if put)
        self._np: dict[Key, tuple[np.ndarray, ...]] = {}
        self._derived: set[Key] = set()  # edge types whose CSC was derived from a put layout
        self.num_partitions = 1
        self.partition_idx = 0
        self.node_pb: PartitionBook | dict[str, PartitionBook] | None = None
        self.edge_pb: Tensor | dict[EdgeType, Tensor] | None = None
        self.meta: dict[str, Any] = {"is_hetero": False}
        self.is_sorted: bool | None = None  # PyG's: edges sorted by destination (CSC order)
        self.root: Path | None = None  # partition folder (for messages)
        self.labels: Tensor | dict[str, Tensor] | None = None  # label file's (PyG's `labels`)
        self._time: dict[str | None, Tensor] = {}
        self._time_np: dict[str | None, np.ndarray] = {}
        self._edge_time: dict[Key, tuple[np.ndarray, np.ndarray]] = {}  # (time, positions)

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_partition(cls: type[G], root: str | Path, pid: int) -> G:
        """Load part `pid` of the partition at `root` (memory-mapped, no copies); numba's set-up
        starts beside it (`app.jit.preload`): this process will sample or fork samplers."""
        preload.start()
        return cls.from_partition_data(load_partition(root, pid))

    @classmethod
    def from_partition_data(cls: type[G], part: PartitionData) -> G:
        store = cls()
        store.num_partitions, store.partition_idx, store.meta = (
            part.num_parts,
            part.index,
            part.meta,
        )
        store.node_pb = pyg_book(part.book)
        store.edge_pb = load_edge_map(part)
        store.root = part.root
        store.labels = read_labels(part.root)
        store.is_sorted = bool(part.meta.get("is_sorted", True))
        items = part.graph.items() if part.is_hetero else [(None, part.graph)]
        for key, g in items:
            size = tuple(int(s) for s in g["size"])
            store._add(key, g["colptr"], *_edge_id_order(g), size)
        if part.node_time is not None:
            store._time = part.node_time if part.is_hetero else {None: part.node_time}
        return store

    def _add(self, key: Key, colptr: Tensor, row: Tensor, edge_id: Tensor, size: tuple) -> None:
        """A partition's CSC; PyG sees it as a COO sorted by destination (its from_partition)."""
        self._np.pop(key, None)
        self._csc[key] = {"colptr": colptr, "row": row, "edge_id": edge_id}
        self._edge_attr[(key, "coo")] = EdgeSpec(key, "coo", is_sorted=True, size=size)

    # -- what the sampler uses ----------------------------------------------------------------

    @property
    def is_hetero(self) -> bool:
        return bool(self.meta.get("is_hetero"))

    @property
    def edge_types(self) -> list[EdgeType]:
        return [k for k in dict.fromkeys(k for k, _ in self._edge_attr) if k is not None]

    def csc(self, edge_type: Key = None) -> dict[str, Tensor]:
        """{'colptr','row','edge_id'} of one edge type (None when homogeneous); derived once
        from a layout put through PyG's API."""
        got = self._csc.get(edge_type)
        if got is None:
            got = self._csc[edge_type] = self._csc_from_put(edge_type)
            self._derived.add(edge_type)
        return got

    def _csc_from_put(self, key: Key) -> dict[str, Tensor]:
        """The CSC of an edge type put through PyG's API (`app.distributed.pyg.graph_store`);
        here every edge type's CSC was loaded, so `key` is unknown."""
        known = sorted({str(k) for k, _ in self._edge_attr})
        raise KeyError(f"edge type {key!r} not in this graph store: {known}")

    def csc_numpy(self, edge_type: Key = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(colptr, row, edge_id) as numpy views (zero-copy) for the numba kernel."""
        views = self._np.get(edge_type)
        if views is None:
            g = self.csc(edge_type)
            views = self._np[edge_type] = tuple(g[k].numpy() for k in ("colptr", "row", "edge_id"))
        return views

    def num_nodes(self, node_type: str | None = None) -> int:
        """Global node count of a type (from the CSC sizes: [N_src, N_dst] per edge type)."""
        for (key, _), attr in self._edge_attr.items():
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

    def put_node_time(self, time: Tensor, node_type: str | None = None) -> None:
        """Every node's time of a type, by global id (PyG keeps it in the feature store: its
        sampler's stores are given it here, since peers' hops read it from this store)."""
        self._time[node_type] = time
        self._time_np.pop(node_type, None)

    def put_edge_time(self, time: Tensor, edge_type: Key = None) -> None:
        """Time of each local edge of a type, in CSC order (`csc_numpy`'s positions): edge-level
        temporal sampling keeps an edge only if it is not later than its seed's time. Each
        column's positions are kept oldest first (ties in CSC order), the order PyG's sampler
        walks a neighbourhood in (it sorts its CSC by edge time)."""
        colptr = self.csc_numpy(edge_type)[0]
        time_np = np.ascontiguousarray(time.numpy())
        if time_np.shape != (int(colptr[-1]),):
            raise ValueError(
                f"edge time of {edge_type!r} has shape {tuple(time_np.shape)} for "
                f"{int(colptr[-1])} local edges: pass one time per edge"
            )
        column = np.repeat(np.arange(colptr.size - 1), np.diff(colptr))
        self._edge_time[edge_type] = (time_np, np.lexsort((time_np, column)).astype(np.int64))

    @property
    def edge_time_types(self) -> list[Key]:
        """Edge types with an edge time (homogeneous: [None] when edges are timed)."""
        return list(self._edge_time)

    def edge_time_numpy(self, edge_type: Key = None) -> tuple[np.ndarray, np.ndarray] | None:
        """(edge time, positions) in CSC order, each column's positions oldest first, or None
        when this edge type has no time: the kernel filters by `time[row[p]]`, so sampling
        over the positions filters by edge, and walks each neighbourhood in time order."""
        return self._edge_time.get(edge_type)

    def owner(self, ids: np.ndarray, node_type: str | None = None) -> np.ndarray:
        """Owning partition of each global id (numpy in and out: the sampler's hot path)."""
        if self.num_partitions == 1:
            return np.full(ids.shape, self.partition_idx, np.int64)
        return owner_of(self.node_pb[node_type] if self.is_hetero else self.node_pb, ids)

    def get_partition_ids_from_nids(self, ids: Tensor, node_type: str | None = None) -> Tensor:
        """Owning partition of each global node id."""
        pb = self.node_pb[node_type] if self.is_hetero else self.node_pb
        return pb[ids] if isinstance(pb, Tensor) else pb.partition_of(ids)

    def get_partition_ids_from_eids(
        self, eids: Tensor, edge_type: EdgeType | None = None
    ) -> Tensor:
        """Owning partition of each global edge id."""
        pb = self.edge_pb[edge_type] if self.is_hetero else self.edge_pb
        return pb[eids]

    def get_global_id(self, edge_type: Key = None) -> Tensor:
        """Global ids of the edges this partition owns (PyG's name)."""
        return self.csc(edge_type)["edge_id"]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_np"], state["_time_np"] = {}, {}  # views, remade on demand
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def owner_of(book: PartitionBook | Tensor, ids: np.ndarray) -> np.ndarray:
    """`book.partition_of` on numpy ids; a dict book (or PyG's plain id → part tensor) is a
    numpy gather (no torch overhead)."""
    if isinstance(book, Tensor):
        return book.numpy()[ids]
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
