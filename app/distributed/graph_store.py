"""`LocalGraphStore`: one partition's topology (CSC over GLOBAL ids) behind PyG's GraphStore API.

PyG's surface (`put_edge_index` / `get_edge_index` / `put_edge_id` in COO, CSR or CSC, keyed
`(edge_type, layout)` as PyG's `_edge_index`): a layout put is stored as given and returned as
given; any other layout is converted on demand from the sampler's CSC (derived once from what
was put). Partitions report PyG's COO attribute (sorted by destination) while keeping CSC.

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
from torch_geometric.utils import sort_edge_index

from app.jit import preload
from app.partition.book import DictPartitionBook, PartitionBook, pyg_book
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
        self._csc: dict[Key, dict[str, Tensor]] = {}  # the sampler's CSC per edge type
        self._edge_index = _Layouts(self._convert)  # PyG's: (edge type, layout) -> as given
        self._edge_attr: dict[tuple[Key, str], EdgeAttr] = {}
        self._edge_id: dict[tuple[Key, str], Tensor] = {}
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
    def from_partition(cls, root: str | Path, pid: int) -> LocalGraphStore:
        """Load part `pid` of the partition at `root` (memory-mapped, no copies); numba's set-up
        starts beside it (`app.jit.preload`): this process will sample or fork samplers."""
        preload.start()
        return cls.from_partition_data(load_partition(root, pid))

    @classmethod
    def from_partition_data(cls, part: PartitionData) -> LocalGraphStore:
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

    @classmethod
    def from_data(
        cls, edge_id: Tensor | None, edge_index: Tensor, num_nodes: int, is_sorted: bool = False
    ) -> LocalGraphStore:
        """A one-partition store over a whole homogeneous graph (global ids = local ids)."""
        store = cls()
        store._put_coo(None, edge_index, edge_id, num_nodes, (num_nodes,) * 2, is_sorted)
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
            store._put_coo(et, ei, (edge_id_dict or {}).get(et), size[1], size, is_sorted)
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
        """A partition's CSC; PyG sees it as a COO sorted by destination (its from_partition)."""
        self._np.pop(key, None)
        self._csc[key] = {"colptr": colptr, "row": row, "edge_id": edge_id}
        self._edge_attr[(key, "coo")] = EdgeAttr(key, EdgeLayout.COO, is_sorted=True, size=size)

    def _put_coo(
        self,
        key: Key,
        edge_index: Tensor,
        edge_id: Tensor,
        num_dst: int,
        size: tuple,
        is_sorted: bool,
    ) -> None:
        """PyG's from_data: the COO sorted by (destination, source) unless `is_sorted`, as given
        to PyG; the sampler's CSC keeps each column in the caller's edge order. Without edge
        ids (PyG allows None) the sampler numbers edges by their position."""
        eid = torch.arange(edge_index.size(1)) if edge_id is None else edge_id
        csc = _to_csc(edge_index, eid, num_dst, is_sorted)
        self._csc[key] = dict(zip(("colptr", "row", "edge_id"), csc, strict=True))
        if not is_sorted:
            edge_index, edge_id = sort_edge_index(edge_index, edge_id, sort_by_row=False)
        attr = EdgeAttr(key, EdgeLayout.COO, is_sorted=True, size=size)
        self._edge_index[(key, "coo")], self._edge_attr[(key, "coo")] = edge_index, attr
        if edge_id is not None:
            self._edge_id[(key, "coo")] = edge_id

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
        """The CSC of edge type `key` from whichever layout was put (CSC, else COO, else CSR)."""
        for layout in ("csc", "coo", "csr"):
            if (key, layout) not in self._edge_index or (key, layout) in self._edge_index.made:
                continue
            given, attr = self._edge_index[(key, layout)], self._edge_attr[(key, layout)]
            eid = self._edge_id.get((key, layout))
            if layout == "csc":
                row, colptr = given
                eid = torch.arange(row.numel()) if eid is None else eid
                return {"colptr": colptr, "row": row, "edge_id": eid}
            if layout == "csr":
                rowptr, col = given
                given = torch.stack([_expand(rowptr), col.long()])
            eid = torch.arange(given[1].numel()) if eid is None else eid
            num_dst = int(attr.size[1]) if attr.size else int(given[1].max()) + 1
            colptr, row, eid = _to_csc(given, eid, num_dst, layout == "coo" and attr.is_sorted)
            return {"colptr": colptr, "row": row, "edge_id": eid}
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

    # -- GraphStore API -----------------------------------------------------------------------

    @staticmethod
    def key(attr: EdgeAttr) -> tuple[Key, str]:
        """PyG's key of `_edge_index` / `_edge_id`: (edge type, layout name)."""
        return attr.edge_type, EdgeLayout(attr.layout).value

    def _put_edge_index(self, edge_index: Any, edge_attr: EdgeAttr) -> bool:
        key = self.key(edge_attr)
        self._forget(edge_attr.edge_type)
        self._edge_index[key], self._edge_attr[key] = edge_index, edge_attr
        return True

    def _get_edge_index(self, edge_attr: EdgeAttr) -> Any:
        """As put for a stored layout; otherwise converted: COO a [2, E] tensor (sorted by
        destination), CSR (rowptr, col), CSC (row, colptr); ids are global, edges those this
        partition owns."""
        key = self.key(edge_attr)
        if key not in self._edge_index and not self._has(edge_attr.edge_type):
            return None
        return self._edge_index[key]

    def _convert(self, key: tuple[Key, str]) -> Any:
        """Layout `key[1]` of edge type `key[0]` from its CSC (`_edge_index`'s fill-in)."""
        et, layout = key
        g = self.csc(et)
        if layout == "csc":
            return g["row"], g["colptr"]
        colptr, row = g["colptr"].long(), g["row"].long()
        col = _expand(colptr)
        if layout == "coo":
            return torch.stack([row, col])
        order = torch.argsort(row, stable=True)
        return csc_pointer(row[order], self._size(et)[0]), col[order]

    def _size(self, et: Key) -> tuple[int, int]:
        for (k, _), attr in self._edge_attr.items():
            if k == et and attr.size:
                return int(attr.size[0]), int(attr.size[1])
        colptr, row = self.csc(et)["colptr"], self.csc(et)["row"]
        return int(row.max()) + 1 if row.numel() else 0, colptr.numel() - 1

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        key = self.key(edge_attr)
        self._forget(edge_attr.edge_type)
        self._edge_attr.pop(key, None)
        found = dict.pop(self._edge_index, key, None) is not None
        if not self._has(edge_attr.edge_type):  # a partition's last view of it: drop the CSC
            found = self._csc.pop(edge_attr.edge_type, None) is not None or found
        return found

    def _has(self, et: Key) -> bool:
        return any(k == et for k, _ in self._edge_attr)

    def _forget(self, et: Key) -> None:
        """Drop conversions of `et` made from what was put before (a put or remove changed it)."""
        self._edge_time.pop(et, None)  # its positions were those of the old edges
        if et in self._derived:
            self._derived.discard(et)
            self._csc.pop(et, None)
            self._np.pop(et, None)
        for key in [k for k in self._edge_index.made if k[0] == et]:
            self._edge_index.made.discard(key)
            dict.pop(self._edge_index, key, None)

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        return list(self._edge_attr.values())

    def put_edge_id(self, edge_id: Tensor, *args: Any, **kwargs: Any) -> bool:
        """PyG's: global edge ids of the edges of a layout put (same order)."""
        key = self.key(self._edge_attr_cls.cast(*args, **kwargs))
        self._forget(key[0])
        self._edge_id[key] = edge_id
        return True

    def get_edge_id(self, *args: Any, **kwargs: Any) -> Tensor | None:
        """PyG's: global ids of the edges of one layout, in that layout's edge order."""
        key = self.key(self._edge_attr_cls.cast(*args, **kwargs))
        if key in self._edge_id:
            return self._edge_id[key]
        put = dict.__contains__(self._edge_index, key) and key not in self._edge_index.made
        if put or not self._has(key[0]):  # a layout put without ids has none (PyG's None)
            return None
        eid = self.csc(key[0])["edge_id"]
        if key[1] != "csr":
            return eid
        return eid[torch.argsort(self.csc(key[0])["row"].long(), stable=True)]

    def remove_edge_id(self, *args: Any, **kwargs: Any) -> bool:
        key = self.key(self._edge_attr_cls.cast(*args, **kwargs))
        return self._edge_id.pop(key, None) is not None

    def get_global_id(self, edge_type: Key = None) -> Tensor:
        """Global ids of the edges this partition owns (PyG's name)."""
        return self.csc(edge_type)["edge_id"]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        made = self._edge_index.made  # conversions are remade on demand
        state["_edge_index"] = {k: v for k, v in self._edge_index.items() if k not in made}
        state["_np"], state["_time_np"] = {}, {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        given = state.pop("_edge_index")
        self.__dict__.update(state)
        self._edge_index = _Layouts(self._convert)
        self._edge_index.update(given)


class _Layouts(dict):
    """PyG's `_edge_index` table: layouts as put; a missing layout is converted (and kept)."""

    def __init__(self, convert: Any) -> None:
        super().__init__()
        self.convert, self.made = convert, set()  # made: keys converted, not put

    def __missing__(self, key: tuple[Key, str]) -> Any:
        value = self[key] = self.convert(key)
        self.made.add(key)
        return value


def _expand(ptr: Tensor) -> Tensor:
    """Compressed pointer → one index per edge (CSC colptr → col, CSR rowptr → row)."""
    ptr = ptr.long()
    return torch.repeat_interleave(torch.arange(ptr.numel() - 1), ptr.diff())


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


def _to_csc(
    edge_index: Tensor, edge_id: Tensor, num_dst: int, is_sorted: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """(colptr, row, edge_id) of an edge list, sorted by destination (stable)."""
    row, col = edge_index
    if not is_sorted:
        perm = torch.argsort(col, stable=True)
        row, col, edge_id = row[perm], col[perm], edge_id[perm]
    return csc_pointer(col, num_dst), row.contiguous(), edge_id.contiguous()
