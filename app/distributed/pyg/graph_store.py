"""`LocalGraphStore`: PyG's GraphStore API over one partition's topology (`GraphStoreCore`).

PyG's surface (`put_edge_index` / `get_edge_index` / `put_edge_id` in COO, CSR or CSC, keyed
`(edge_type, layout)` as PyG's `_edge_index`): a layout put is stored as given and returned as
given; any other layout is converted on demand from the sampler's CSC (derived once from what
was put). Partitions report PyG's COO attribute (sorted by destination) while keeping CSC.

The sampler reads the core's state only (`app.distributed.graph_store`, PyG-free, what a
sampler process loads); this subclass adds what PyG's users and loaders call.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr, EdgeLayout, GraphStore
from torch_geometric.utils import sort_edge_index

from app.distributed.graph_store import EdgeSpec, EdgeType, GraphStoreCore, Key
from app.partition.book import DictPartitionBook
from app.partition.reader import csc_pointer


class LocalGraphStore(GraphStoreCore, GraphStore):
    """Topology of the local partition plus the id → partition books of the whole graph."""

    def __init__(self) -> None:
        GraphStoreCore.__init__(self)
        GraphStore.__init__(self)
        self._edge_index = _Layouts(self._convert)  # PyG's: (edge type, layout) -> as given
        self._edge_id: dict[tuple[Key, str], Tensor] = {}

    # -- construction -------------------------------------------------------------------------

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
        return [_pyg_attr(a) for a in self._edge_attr.values()]

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

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        made = self._edge_index.made  # conversions are remade on demand
        state["_edge_index"] = {k: v for k, v in self._edge_index.items() if k not in made}
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
        self.convert = convert
        self.made: set[tuple[Key, str]] = set()  # keys converted, not put

    def __missing__(self, key: tuple[Key, str]) -> Any:
        value = self[key] = self.convert(key)
        self.made.add(key)
        return value


def _expand(ptr: Tensor) -> Tensor:
    """Compressed pointer → one index per edge (CSC colptr → col, CSR rowptr → row)."""
    ptr = ptr.long()
    return torch.repeat_interleave(torch.arange(ptr.numel() - 1), ptr.diff())


def _pyg_attr(attr: Any) -> EdgeAttr:
    """PyG's `EdgeAttr` of a stored layout (the core's `EdgeSpec` for a partition's)."""
    if isinstance(attr, EdgeSpec):
        return EdgeAttr(attr.edge_type, EdgeLayout(attr.layout), attr.is_sorted, attr.size)
    return attr


def _to_csc(
    edge_index: Tensor, edge_id: Tensor, num_dst: int, is_sorted: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """(colptr, row, edge_id) of an edge list, sorted by destination (stable)."""
    row, col = edge_index
    if not is_sorted:
        perm = torch.argsort(col, stable=True)
        row, col, edge_id = row[perm], col[perm], edge_id[perm]
    return csc_pointer(col, num_dst), row.contiguous(), edge_id.contiguous()
