"""`FeatureStoreCore`: one partition's node (and edge) rows, plus the distributed lookup that
merges local rows with rows fetched from their owners.

PyG-free: a sampler process loads this and never imports torch_geometric (issue 38: PyG is a
large share of its fixed memory). PyG's `FeatureStore` API over it (`put_tensor` /
`get_tensor`, `from_data`, `lookup_features`, ...) is `app.distributed.pyg.feature_store.
LocalFeatureStore`, a subclass. Rows are kept by (group, name): group a node type (None when
homogeneous) or an edge type (`(None, None)` when homogeneous); node `time` as PyG keeps it,
one value per node of the whole graph, indexed by global id (such attributes are read by id,
never fetched by RPC).

Rows are stored as in the partition files — owned global ids sorted ascending, features in the
same order, memory-mapped — so global → row is one vectorised `searchsorted`, and a lookup
copies only the requested rows. `fetch` issues one batched RPC per remote partition, all before
the local gather runs, then scatters every answer back into request order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from numba import njit
from torch import Tensor

from app.distributed import hot_cache, rpc, wire
from app.distributed.graph_store import load_edge_map, owner_of
from app.distributed.halo_cache import HaloCache, load_or_fill
from app.distributed.routing import Positions, merge_rows, route, split_by_owner, take
from app.partition.book import PartitionBook, pyg_book
from app.partition.reader import PartitionData, load_partition

Group = Any  # node type (None when homogeneous) or edge type ((None, None) when homogeneous)
Alloc = Callable[[str, tuple, np.dtype], np.ndarray]  # (attr name, shape, dtype) -> output array


def _empty(_: str, shape: tuple, dtype: np.dtype) -> np.ndarray:
    return np.empty(shape, dtype)


@njit(cache=True, nogil=True)
def _copy_rows(src, rows, dst, pos):
    """dst[pos[i]] = src[rows[i]], rows of bytes (an explicit inner loop: LLVM turns it into a
    block copy; a slice assignment here is ~3x slower)."""
    width = src.shape[1]
    for i in range(rows.size):
        r, p = rows[i], pos[i]
        for j in range(width):
            dst[p, j] = src[r, j]


def _byte_rows(a: np.ndarray) -> np.ndarray:
    """A C-contiguous array as a 2-D uint8 view, one row per leading index."""
    return a.reshape(a.shape[0], -1).view(np.uint8)


def gather_rows(src: np.ndarray, rows: np.ndarray, dst: np.ndarray, where: Positions) -> None:
    """`dst[where] = src[rows]` (all of `dst` for None) in one pass: no temporary array, so a
    batch's rows are copied once, straight into their output (e.g. shared memory)."""
    if where is None:
        np.take(src, rows, axis=0, out=dst)
    elif rows.size and src.flags.c_contiguous and dst.flags.c_contiguous and src.size:
        _copy_rows(_byte_rows(src), rows.astype(np.int64, copy=False), _byte_rows(dst), where)
    elif rows.size:
        dst[where] = src[rows]


F = TypeVar("F", bound="FeatureStoreCore")


class FeatureStoreCore:
    """Node features and labels of the local partition; remote rows come by RPC."""

    def __init__(self) -> None:
        self._feat: dict[tuple[Group, str], Tensor] = {}
        self._global_id: dict[Group, Tensor] = {}
        self._by_id: set[tuple[Group, str]] = set()  # attributes indexed by global id (time)
        self.put_keys: set[tuple[Group, str]] = set()  # put by `put_tensor` (not from files)
        self.num_partitions = 1
        self.partition_idx = 0
        self.node_feat_pb: PartitionBook | dict[str, PartitionBook] | None = None
        self.edge_feat_pb: Tensor | dict[Any, Tensor] | None = None  # edge → part (PyG's name)
        self.meta: dict[str, Any] = {"is_hetero": False}
        self.labels: Tensor | dict[str, Tensor] | None = None  # PyG's; the loader reads y
        self.local_only = False  # PyG's: True when this store never serves peers
        self.rpc_call_id: int | None = None  # PyG's; features are served by endpoint name here
        self.router: rpc.RPCRouter | None = None
        self.remote_rows = 0  # rows fetched by RPC so far (statistics)
        self.remote_bytes = 0  # bytes of those fetches: ids sent, rows received
        self.cache_hits = 0  # remote rows served by a cache instead (halo or hot)
        self.hot_hits = 0  # of those, rows served by the hot cache
        self.root: Path | None = None  # partition folder (where the cache files go)
        self.cache: HaloCache | None = None
        self.hot: HaloCache | None = None
        self._cache_want: tuple[int, Any] | None = None  # (rows, graph store to rank by)
        self._hot_want: tuple[int, int, Any] | None = None  # (bytes, halo rows, graph store)
        self._cache_lock = threading.Lock()
        self._views: dict[tuple[int, Any], np.ndarray] = {}
        self._starts: dict[Group, int | None] = {}  # see `_range_start`
        self._row_maps: dict[Group, np.ndarray] = {}  # see `_row_map`

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_partition(cls: type[F], root: str | Path, pid: int) -> F:
        """Load part `pid`'s features (memory-mapped, no copies)."""
        return cls.from_partition_data(load_partition(root, pid))

    @classmethod
    def from_partition_data(cls: type[F], part: PartitionData) -> F:
        """The part's node rows; node `time` of the whole graph (PyG's); edge ids, features and
        times of the owned edges; labels (`y`) last, as PyG lists attributes without them."""
        store = cls()
        store.num_partitions, store.partition_idx, store.meta = (
            part.num_parts,
            part.index,
            part.meta,
        )
        store.node_feat_pb = pyg_book(part.book)
        store.edge_feat_pb = load_edge_map(part)
        store.root = part.root
        hetero = part.is_hetero
        node_time = (part.node_time if hetero else {None: part.node_time}) if (
            part.node_time is not None) else {}  # fmt: skip
        labels = []
        for group, nf in part.node_feats.items() if hetero else [(None, part.node_feats)]:
            store._global_id[group] = nf["global_id"]
            for name, tensor in nf.get("feats", {}).items():
                if name == "y":
                    labels.append((group, tensor))
                else:
                    store._feat[(group, name)] = tensor
            time = node_time.get(group)
            if time is None and nf.get("time") is not None:
                time = nf["time"]  # PyG's own partitions keep every node's time here
            if time is not None:
                store._feat[(group, "time")] = time
                store._by_id.add((group, "time"))
        edges = part.edge_feats.items() if hetero else [((None, None), part.edge_feats)]
        for group, ef in edges:
            if not ef or "global_id" not in ef:
                continue
            store._global_id[group] = ef["global_id"]
            for name, tensor in ef.get("feats", {}).items():
                store._feat[(group, name)] = tensor
            if ef.get("edge_time") is not None:
                store._feat[(group, "edge_time")] = ef["edge_time"]
        for group, y in labels:
            store._feat[(group, "y")] = y
        return store

    def put_global_id(self, global_id: Tensor, group_name: Group) -> bool:
        """PyG's: the global ids of a group's rows (any order; rows stay as put)."""
        self._global_id[group_name] = global_id
        self._forget(group_name)
        return True

    def remove_global_id(self, group_name: Group) -> bool:
        self._forget(group_name)
        return self._global_id.pop(group_name, None) is not None

    def get_local_id(self, group_name: Group, global_id: Tensor) -> Tensor:
        """Row of each owned global id (an id this store does not hold: KeyError naming it)."""
        ids = torch.as_tensor(global_id)
        return torch.from_numpy(self.local_rows(ids.numpy(), group_name)).to(torch.int64)

    def _forget(self, group: Group) -> None:
        self._views.clear()
        self._starts.pop(group, None)
        self._row_maps.pop(group, None)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_cache_lock=None, _views={}, _starts={}, _row_maps={}, cache=None, hot=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache_lock = threading.Lock()

    # -- local rows ---------------------------------------------------------------------------

    @property
    def id_wire(self) -> wire.IdWire:
        """Widths of the ids this store sends to owners (from the partition's id spaces)."""
        return wire.IdWire.of(self.meta)

    @property
    def is_hetero(self) -> bool:
        return bool(self.meta.get("is_hetero"))

    def attr_names(self, group: Group = None) -> list[str]:
        return [name for g, name in self._feat if g == group]

    def node_groups(self) -> list[Group]:
        """The node types this store holds rows of (None when homogeneous)."""
        return [g for g in self._global_id if not isinstance(g, tuple)]

    def row_nbytes(self, group: Group = None) -> int:
        """Bytes of one node's row over every attribute of `group` (what a cache holds)."""
        return sum(
            self._feat[(group, a)][:1].numel() * self._feat[(group, a)].element_size()
            for a in self.attr_names(group)
        )

    def row_attrs(self, group: Group = None) -> list[str]:
        """The attributes of `group` stored by row (not by global id, as node times are)."""
        return [a for a in self.attr_names(group) if (group, a) not in self._by_id]

    def num_rows(self, group: Group = None) -> int:
        """Rows this store holds of `group` (its owned nodes, or edges)."""
        return self._global_id[group].numel()

    def get_global_id(self, group_name: Group = None) -> Tensor | None:
        """PyG's: global ids of a group's rows (node type, or edge type for edge features)."""
        return self._global_id.get(group_name)

    def local_rows(self, ids: np.ndarray, group: Group = None) -> np.ndarray:
        """Row of each (owned) global id; unowned → KeyError. Owned ids that form one range
        (relabelled partitions) map by subtraction, others through a dense id → row map (one
        gather per id: a batch's ids are random, so a binary search missed cache 20 times)."""
        if not ids.size:
            return np.empty(0, np.int64)
        start = self._range_start(group)
        if start is not None:
            pos = np.subtract(ids, start, dtype=np.int64)
            size = self._global_id[group].numel()
            if int(pos.min()) >= 0 and int(pos.max()) < size:
                return pos
        else:
            row_of = self._row_map(group)
            if int(ids.min()) >= 0 and int(ids.max()) < row_of.size:
                pos = row_of[ids]
                if int(pos.min()) >= 0:
                    return pos.astype(np.int64)
        gid = self._numpy(self._global_id, group)
        owned = np.isin(ids, gid)
        raise KeyError(
            f"node ids {ids[~owned][:5].tolist()} (type {group}) are not owned by partition "
            f"{self.partition_idx}"
        )

    def _range_start(self, group: Group) -> int | None:
        """First owned id when the owned ids are exactly one range, else None (cached)."""
        if group not in self._starts:
            gid = self._numpy(self._global_id, group)
            whole = gid.size and int(gid[-1]) - int(gid[0]) + 1 == gid.size
            whole = whole and bool((np.diff(gid) == 1).all())  # rows put in any order
            self._starts[group] = int(gid[0]) if whole else None
        return self._starts[group]

    def _row_map(self, group: Group) -> np.ndarray:
        """Dense global id → local row (-1: not owned) up to the largest owned id (cached;
        int32 while rows fit: 4 bytes per node of the graph, built once per process)."""
        if group not in self._row_maps:
            gid = self._numpy(self._global_id, group)
            dtype = np.int32 if gid.size < 2**31 else np.int64
            row_of = np.full(int(gid.max()) + 1 if gid.size else 0, -1, dtype)
            row_of[gid] = np.arange(gid.size, dtype=dtype)
            self._row_maps[group] = row_of
        return self._row_maps[group]

    def _numpy(self, table: dict, key: Any) -> np.ndarray:
        """Zero-copy numpy view of a stored tensor (cached: numpy gathers beat torch's here)."""
        view = self._views.get((id(table), key))
        if view is None:
            view = self._views[(id(table), key)] = table[key].numpy()
        return view

    def local_get(
        self,
        ids: Tensor | np.ndarray,
        group: Group,
        attrs: Sequence[str],
        alloc: Alloc | None = None,
    ) -> dict[str, Tensor]:
        """Rows of `attrs` for owned `ids`, in request order (copies only these rows, once);
        attributes kept by global id (time) are read at `ids` themselves."""
        ids = np.asarray(ids)
        by_row = [a for a in attrs if (group, a) not in self._by_id]
        rows = self.local_rows(ids, group) if by_row else None
        out = {}
        for a in attrs:
            feat = self._numpy(self._feat, (group, a))
            at = ids if (group, a) in self._by_id else rows
            dest = (alloc or _empty)(a, (at.size, *feat.shape[1:]), feat.dtype)
            out[a] = torch.from_numpy(np.take(feat, at, axis=0, out=dest))
        return out

    def owner(self, ids: np.ndarray, group: Group = None) -> np.ndarray:
        """Owning partition of each global id (numpy in and out); edge-type groups route by
        the edge map."""
        if self.num_partitions == 1:
            return np.full(ids.shape, self.partition_idx, np.int64)
        edge = isinstance(group, tuple)
        book = self.edge_feat_pb if edge else self.node_feat_pb
        return owner_of(book[group] if self.is_hetero else book, ids)

    # -- halo cache ---------------------------------------------------------------------------

    def use_cache(self, rows: int, graph_store: Any, hot_bytes: int = 0) -> None:
        """Serve the `rows` most-sampled halo nodes' features from a node-wide cache, and
        up to `hot_bytes` of the highest-degree other remote nodes' from a second one (both
        filled on the first remote lookup; see `halo_cache`, `hot_cache`). 0 turns one off."""
        if (self._cache_want or (0,))[0] != rows:
            self._cache_want, self.cache = ((rows, graph_store) if rows else None), None
        if self._hot_want is None or self._hot_want[:2] != (hot_bytes, rows):
            self._hot_want, self.hot = ((hot_bytes, rows, graph_store) if hot_bytes else None), None

    def _halo_cache(self) -> HaloCache | None:
        if self._cache_want is None or self.num_partitions == 1:
            return None
        with self._cache_lock:
            if self.cache is None:
                rows, gs = self._cache_want  # another process may be filling: wait that long
                self.cache = self._uncounted(
                    lambda: load_or_fill(self, gs, self.root, rows, 4 * rpc.rpc_timeout())
                )
        return self.cache

    def _hot_cache(self) -> HaloCache | None:
        if self._hot_want is None or self.num_partitions == 1:
            return None
        with self._cache_lock:
            if self.hot is None:
                nbytes, rows, gs = self._hot_want
                self.hot = self._uncounted(
                    lambda: hot_cache.load_or_fill(self, gs, nbytes, rows, 4 * rpc.rpc_timeout())
                )
        return self.hot

    def _uncounted(self, fill: Callable[[], HaloCache]) -> HaloCache:
        """`fill()`, its fetches left out of the per-batch counters: a cache is filled once,
        at start (`prepare`), while node lookups wait for it (`_cache_lock`); an edge-feature
        fetch (no cache) running meanwhile would go uncounted too."""
        rows, nbytes = self.remote_rows, self.remote_bytes
        try:
            return fill()
        finally:
            self.remote_rows, self.remote_bytes = rows, nbytes

    def caches(self) -> list[HaloCache]:
        """The halo cache, then the hot cache, of those this store uses (filled or mapped on
        first use; none in a one-partition job)."""
        return [c for c in (self._halo_cache(), self._hot_cache()) if c is not None]

    def prepare(self) -> None:
        """Open what the first lookups would: the halo and hot caches (filled now if never
        filled for this partition; needs the RPC router) and the id → row map of every node
        type."""
        if self.num_partitions > 1 and self.router is not None:
            self._halo_cache()
            self._hot_cache()
        for group in self._global_id:
            if self._range_start(group) is None:
                self._row_map(group)

    def counters(self) -> dict[str, float]:
        """Remote feature traffic so far: rows fetched by RPC and their bytes (ids sent, rows
        received), rows served by the caches (`cache_hits`: halo and hot; `hot_cache_hits`:
        the hot cache's share)."""
        asked = self.remote_rows + self.cache_hits
        return {
            "feature_rows": self.remote_rows,
            "feature_bytes": self.remote_bytes,
            "cache_hits": self.cache_hits,
            "hot_cache_hits": self.hot_hits,
            "cache_rows": self.cache.num_rows if self.cache is not None else 0,
            "hot_cache_rows": self.hot.num_rows if self.hot is not None else 0,
            "cache_hit_rate": self.cache_hits / asked if asked else 0.0,
            "hot_cache_hit_rate": self.hot_hits / asked if asked else 0.0,
        }

    # -- distributed lookup -------------------------------------------------------------------

    def fetch(
        self,
        ids: Tensor,
        group: Group = None,
        attrs: Sequence[str] | None = None,
        cache: bool = True,
        alloc: Alloc | None = None,
        wire_dtype: str = "store",
    ) -> dict[str, Tensor]:
        """`attrs` (default: all) of any global `ids`, local and remote, in request order.

        Remote rows come from the halo cache, else the hot cache, when one holds them
        (`cache`), else from their owners by RPC, in `wire_dtype` (`wire.narrow_rows`; outputs
        keep the store's dtype).
        `alloc(name, shape, dtype)` provides the output arrays (e.g. shared memory).
        """
        attrs = list(self.attr_names(group) if attrs is None else attrs)
        by_id = [a for a in attrs if (group, a) in self._by_id]
        if by_id:  # every partition holds these whole: no RPC
            rest = [a for a in attrs if a not in by_id]
            out = self.local_get(ids.numpy(), group, by_id, alloc)
            return {**out, **(self.fetch(ids, group, rest, cache, alloc) if rest else {})}
        if not attrs:
            return {}
        ids_np = ids.numpy()
        owner = self.owner(ids_np, group)
        split = split_by_owner(owner)
        if split == {self.partition_idx: None}:
            return self.local_get(ids_np, group, attrs, alloc)
        caches = self.caches() if cache else []
        hits: dict[
            int, tuple[HaloCache, np.ndarray]
        ] = {}  # pseudo-partition past the last real one -> (its cache, rows of it)
        for c in caches:
            p_c = self.num_partitions + len(hits)
            remote = np.flatnonzero(owner < self.num_partitions)
            remote = remote[owner[remote] != self.partition_idx]
            hit, rows = c.lookup(ids_np[remote], group)
            hits[p_c] = (c, rows)
            if rows.size:
                owner = owner.copy()
                owner[remote[hit]] = p_c
                self.cache_hits += rows.size
                self.hot_hits += rows.size if c is self.hot else 0
        if any(rows.size for _, rows in hits.values()):
            split = split_by_owner(owner)
        edge = isinstance(group, tuple)
        here = {self.partition_idx, *hits}  # answered in this process
        if self.router is None and set(split) - here:
            raise RuntimeError(
                f"ids of partitions {sorted(split)} requested but this store has no RPC router"
            )
        out = {}  # request-ordered outputs, allocated once; every part writes its rows in place
        for a in attrs:
            feat = self._numpy(self._feat, (group, a))
            out[a] = (alloc or _empty)(a, (ids_np.size, *feat.shape[1:]), feat.dtype)

        def call(p: int, where: Positions) -> rpc.PendingCall:
            asked = take(ids_np, where)
            sent = self.id_wire.edges_out(asked) if edge else self.id_wire.nodes_out(asked)
            self.remote_bytes += wire.nbytes([sent])
            args = (group, sent, attrs, wire_dtype)
            return rpc.call_partition(self.router, p, "features", args)

        def run(p: int, where: Positions) -> None:
            mine = p == self.partition_idx
            rows = self.local_rows(take(ids_np, where), group) if mine else hits[p][1]
            for a in attrs:
                src = self._numpy(self._feat, (group, a)) if mine else hits[p][0].rows(group, a)
                gather_rows(src, rows, out[a], where)

        answers = route(split, here, call, run)
        for p, got in answers.items():
            if p in here:
                continue
            self.remote_rows += ids_np.size if split[p] is None else split[p].size
            self.remote_bytes += wire.nbytes(list(got.values()))
            for a in attrs:
                merge_rows(split, {p: wire.rows_numpy(got[a])}, out[a])
        return {a: torch.from_numpy(v) for a, v in out.items()}

    # -- attributes by name ------------------------------------------------------------------

    def put_attr(self, tensor: Tensor, group: Group, name: str) -> None:
        """Keep `tensor` as attribute `name` of `group` (rows in the order of its global ids;
        PyG's `put_tensor`); it is one put by the script, not read from the partition files."""
        self._views.clear()
        self.put_keys.add((group, name))
        self._by_id.discard((group, name))
        self._feat[(group, name)] = tensor

    def attr(self, group: Group, name: str) -> Tensor:
        """The whole stored tensor of attribute `name` of `group` (KeyError when absent)."""
        key = (group, name)
        if key not in self._feat:
            raise KeyError(f"no attribute {name!r} of group {group!r} in this feature store")
        return self._feat[key]

    def tensors_put(self) -> dict[tuple[Group, str], Tensor]:
        """The tensors put by `put_attr` (not read from the partition's files), by key."""
        return {key: self._feat[key] for key in self.put_keys}
