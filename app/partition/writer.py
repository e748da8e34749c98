"""Write a partitioned graph to disk in PyG 2.8's `Partitioner` layout, plus our extras.

Layout (format_version 1; the PyG file and key names, so PyG's `LocalGraphStore` /
`LocalFeatureStore.from_partition` can read it too)::

    root/
      META.json        PyG keys: num_parts, is_hetero, node_types, edge_types, is_sorted,
                       node_offset; ours: format_version, fingerprint (dataset fingerprint +
                       partition parameters), dataset_fingerprint, params, method, relabel,
                       node_bounds (relabel only), num_nodes, num_edges,
                       checksums {relative path: xxh3-64 of the file}, stats.
                       Written last: a folder without it is incomplete.
      node_map.pt      int64 [N] node -> part      (hetero: node_map/<ntype>.pt)
      edge_map.pt      int64 [E] edge -> part      (hetero: edge_map/<src>__<rel>__<dst>.pt)
      orig_id.pt       relabel only: int64 [N] new id -> original id (hetero: orig_id/<ntype>.pt)
      new_id.pt        relabel only: int64 [N] original id -> new id (hetero: new_id/<ntype>.pt)
      node_time.pt     temporal only: [N] node time by (new) node id, for EVERY node (owned and
                       halo), which temporal sampling reads as node_time[row[p]]
                       (hetero: node_time/<ntype>.pt for the types with a `time`)
      part_<i>/graph.pt       {'row', 'col', 'edge_id', 'size', 'colptr', 'halo'}
      part_<i>/node_feats.pt  {'global_id', 'feats': {'x', 'y'}, 'time'? (all nodes)}
      part_<i>/edge_feats.pt  {'global_id', 'feats': {'edge_attr'}?, 'edge_time'?} or {}
      part_<i>/seeds.pt       {'train', 'val', 'test'}

Ownership rule (PyG's): every node belongs to exactly one part (`node_map`) and every edge
to the part of its DESTINATION (`edge_map[e] == node_map[dst[e]]`), so a part can sample
the in-neighbours of its own nodes without asking anyone.

`graph.pt` holds part i's owned edges: `row` (sources) / `col` (destinations) in global node
ids, sorted by `col` (CSC order; within a column by edge time, else by the source's node time
when the graph is temporal, else by edge id); `edge_id` the global edge ids; `size` (N_src,
N_dst); `colptr` [N_dst + 1] CSC pointer over GLOBAL destination ids (the neighbours of
owned node v are row[colptr[v]:colptr[v+1]], empty for nodes owned elsewhere); `halo` the
sorted global ids of remote sources of owned edges (the nodes whose features live elsewhere).
These id arrays are int32 wherever their values fit (< 2^31: node ids, edge ids, the part's
edge count), int64 beyond; readers accept both (older partitions are all int64).

`node_feats.pt` holds the owned nodes: `global_id` (sorted) and their rows of `x` and `y`
(byte-identical to the dataset's), plus, for temporal graphs, `time`: as in PyG, the time of
EVERY node by (new) id, the same in every part, from this writer and the streaming one
(older partitions hold the owned rows only; readers take `node_time.pt`). `seeds.pt` holds the
owned nodes of each split (the training seeds of this part). `edge_feats.pt` holds the owned
edges' `edge_attr` / `edge_time` in `graph.pt`'s order, or {} when the graph has none.

Heterogeneous graphs: `graph.pt` and `edge_feats.pt` are dicts keyed by edge type tuple
(edge ids and node ids are per type, i.e. index `data[edge_type]` / `data[node_type]`);
`node_feats.pt` is keyed by node type (`feats` is {} for featureless types, `y` only where
labels exist); `seeds.pt` is {'train': {ntype: ids}, ...} for the labelled node types. The
`halo` of an edge type holds remote nodes of its source type.

Relabel (`relabel=True`, DGL's RangePartitionBook): nodes are renumbered so part p owns the
contiguous new ids [node_bounds[p], node_bounds[p+1]) (per type for hetero), in the original
order inside a part, or with `order="locality"` community by community (`app.partition.order`:
neighbours get nearby ids, so kernels that read their rows find them in cache). Every id in
graph/feature/seed/map files is then a NEW id; `orig_id.pt` maps back, so labels and results
stay attributable. Edge ids are never changed.

The folder is written as `<root>.tmp-<pid>` and renamed to `root` when complete; a crashed
run leaves only the tmp folder, which never loads and is removed by the next run.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numba
import numpy as np
import torch
import xxhash
from torch import Tensor
from torch_geometric.data import HeteroData
from tqdm import tqdm

from app.contract import SPLITS
from app.fsutil import pid_alive
from app.labels import check_labels
from app.partition.assign import assign_nodes, symmetric_csr
from app.partition.order import locality_key
from app.partition.reader import (
    FORMAT_VERSION,
    META_FILE,
    PartitionError,
    csc_pointer,
    file_checksum,
    halo_of,
    read_meta,
    type_str,
)

log = logging.getLogger("distgnn")

NodeKey = str | None  # None: the single node type of a homogeneous graph
EdgeKey = tuple[str, str, str] | None


@dataclass
class PartitionMeta:
    """What `partition_graph` produced (or found and reused) at `root`."""

    root: Path
    num_parts: int
    is_hetero: bool
    fingerprint: str
    method: str
    relabel: bool
    stats: dict[str, Any]
    reused: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, root: Path, meta: dict[str, Any], reused: bool) -> PartitionMeta:
        return cls(
            root=Path(root),
            num_parts=int(meta["num_parts"]),
            is_hetero=bool(meta["is_hetero"]),
            fingerprint=str(meta.get("fingerprint", "")),
            method=str(meta.get("method", "")),
            relabel=bool(meta.get("relabel", False)),
            stats=meta.get("stats", {}),
            reused=reused,
            raw=meta,
        )


# ---------------------------------------------------------------- fingerprints


def partition_fingerprint(dataset_fingerprint: str, **params: Any) -> str:
    """Hash of the dataset fingerprint, the partition parameters and the format version."""
    payload = json.dumps(
        {"dataset": dataset_fingerprint, "format": FORMAT_VERSION, **params}, sort_keys=True
    )
    return xxhash.xxh3_64_hexdigest(payload.encode())


def data_fingerprint(data: Any) -> str:
    """Content hash of a graph's tensors: the fallback when no dataset fingerprint is given."""
    h = xxhash.xxh3_64()
    for store in data.stores:
        for key in sorted(store.keys()):
            value = store[key]
            if isinstance(value, Tensor):
                h.update(key.encode())
                h.update(value.detach().reshape(-1).contiguous().view(torch.uint8).numpy())
    return h.hexdigest()


def partition_params(
    num_parts: int,
    method: str,
    recursive: bool,
    balance_train: bool,
    balance_edges: bool,
    relabel: bool,
    seed: int,
    order: str = "original",
) -> dict[str, Any]:
    """The parameters that change the output (METIS-only knobs dropped for `random`; `order`
    only when not the original one, so older partitions keep their fingerprint)."""
    params: dict[str, Any] = {"num_parts": num_parts, "method": method, "relabel": relabel}
    params["seed"] = seed
    if method == "metis":
        params.update(recursive=recursive, balance_train=balance_train, balance_edges=balance_edges)
    if order != "original":
        params["order"] = order
    return params


# ---------------------------------------------------------------- graph view


@dataclass
class _View:
    """A homogeneous or heterogeneous graph seen as typed stores (homogeneous: key None)."""

    is_hetero: bool
    nodes: dict[NodeKey, Any]  # node store per type
    edges: dict[EdgeKey, Any]  # edge store per type
    num_nodes: dict[NodeKey, int]

    @classmethod
    def of(cls, data: Any) -> _View:
        if isinstance(data, HeteroData):
            nodes = {t: data[t] for t in data.node_types}
            edges = {tuple(t): data[t] for t in data.edge_types}
            return cls(True, nodes, edges, {t: int(data[t].num_nodes) for t in nodes})
        return cls(False, {None: data}, {None: data}, {None: int(data.num_nodes)})

    def ends(self, etype: EdgeKey) -> tuple[NodeKey, NodeKey]:
        return (etype[0], etype[2]) if etype is not None else (None, None)

    def node_attr(self, ntype: NodeKey, key: str) -> Tensor | None:
        value = getattr(self.nodes[ntype], key, None)
        n = self.num_nodes[ntype]
        if isinstance(value, Tensor) and value.dim() > 0 and value.size(0) == n:
            return value
        return None

    def edge_time(self, etype: EdgeKey) -> Tensor | None:
        store = self.edges[etype]
        num_edges = store.edge_index.size(1)
        for key in ("edge_time", "time"):
            value = getattr(store, key, None)
            if isinstance(value, Tensor) and value.dim() == 1 and value.numel() == num_edges:
                if key == "time" and not self.is_hetero and num_edges == self.num_nodes[None]:
                    continue  # homogeneous `time` of length N == E: treat as node time
                return value
        return None

    def offsets(self) -> dict[NodeKey, int]:
        out, offset = {}, 0
        for t, n in self.num_nodes.items():
            out[t] = offset
            offset += n
        return out


# ---------------------------------------------------------------- assignment


def _homogeneous(view: _View) -> tuple[Tensor, dict[NodeKey, int], int]:
    """(edge_index, offset per node type, node count) of the view as one homogeneous graph."""
    offsets = view.offsets()
    if not view.is_hetero:
        return view.edges[None].edge_index, offsets, view.num_nodes[None]
    edge_index = torch.cat(
        [
            view.edges[et].edge_index + torch.tensor([[offsets[et[0]]], [offsets[et[2]]]])
            for et in view.edges
        ],
        dim=1,
    )
    return edge_index, offsets, sum(view.num_nodes.values())


def _per_type(view: _View, values: Tensor, offsets: dict[NodeKey, int]) -> dict[NodeKey, Tensor]:
    if not view.is_hetero:
        return {None: values}
    return {t: values[off : off + view.num_nodes[t]].clone() for t, off in offsets.items()}


def _assign(
    view: _View,
    flat: tuple[Tensor, dict[NodeKey, int], int],
    num_parts: int,
    method: str,
    **kw: Any,
) -> dict[NodeKey, Tensor]:
    """node -> part per node type, from one assignment of the homogeneous view (`flat`:
    `_homogeneous(view)`)."""
    edge_index, offsets, total = flat
    if view.is_hetero:
        train = torch.zeros(total, dtype=torch.bool)
        for t, off in offsets.items():
            mask = view.node_attr(t, "train_mask")
            if mask is not None:
                train[off : off + view.num_nodes[t]] = mask
    else:
        train = view.node_attr(None, "train_mask")
    parts = assign_nodes(edge_index, total, num_parts, method, train_mask=train, **kw)
    return _per_type(view, parts, offsets)


def _locality(
    view: _View,
    node_map: dict[NodeKey, Tensor],
    offsets: dict[NodeKey, int],
    csr: tuple[np.ndarray, np.ndarray],
    seed: int,
) -> dict[NodeKey, Tensor]:
    """The `app.partition.order` community of every node, per node type (`csr`: the
    homogeneous view's undirected adjacency, node types at `offsets`)."""
    start = time.perf_counter()
    parts = torch.cat([node_map[t] for t in offsets])
    key = locality_key(csr, parts, seed)
    log.info(
        "locality order: %d communities (label propagation, %.1f s)",
        int(torch.unique(key).numel()),
        time.perf_counter() - start,
    )
    return _per_type(view, key, offsets)


def _inverse(perm: Tensor) -> Tensor:
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    return inv


def _relabel(
    node_map: Tensor, num_parts: int, key: Tensor | None = None
) -> tuple[Tensor, Tensor, list[int]]:
    """(new_id, orig_id, bounds): part p owns new ids [bounds[p], bounds[p+1]), numbered in
    original order, or by `key` first (ties in original order) when given."""
    pre = None if key is None else torch.sort(key, stable=True).indices
    orig_id = torch.sort(node_map if pre is None else node_map[pre], stable=True).indices
    if pre is not None:
        orig_id = pre[orig_id]
    new_id = _inverse(orig_id)
    counts = torch.bincount(node_map, minlength=num_parts)
    bounds = [0] + torch.cumsum(counts, 0).tolist()
    return new_id, orig_id, bounds


# ---------------------------------------------------------------- edge split


@numba.njit(cache=True)
def _counting_order(keys: np.ndarray, num_keys: int) -> tuple:
    """Stable counting sort: (order, ptr) with keys[order] sorted, ptr[k] = first slot of k."""
    ptr = np.zeros(num_keys + 1, np.int64)
    for k in keys:
        ptr[k + 1] += 1
    for k in range(num_keys):
        ptr[k + 1] += ptr[k]
    cursor = ptr[:-1].copy()
    order = np.empty(keys.size, np.int64)
    for i in range(keys.size):
        order[cursor[keys[i]]] = i
        cursor[keys[i]] += 1
    return order, ptr


def _edge_order(dst_rank: Tensor, num_keys: int, tie: Tensor | None) -> tuple[Tensor, Tensor]:
    """Stable O(E) order of edges by destination rank (ties by `tie`, then edge id)."""
    pre = torch.sort(tie, stable=True).indices if tie is not None else None
    keys = dst_rank if pre is None else dst_rank[pre]
    order, ptr = _counting_order(keys.numpy(), num_keys)
    order = torch.from_numpy(order)
    return (order if pre is None else pre[order]), torch.from_numpy(ptr)


@dataclass
class _EdgeSplit:
    """One edge type in write-space ids, ordered by (dst part, dst, tie)."""

    src: Tensor
    dst: Tensor
    order: Tensor
    ptr: Tensor  # over destination ranks
    size: tuple[int, int]


# ---------------------------------------------------------------- writing


class _Writer:
    """Writes the files of one partition into a tmp folder and records their checksums."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.checksums: dict[str, str] = {}

    def save(self, obj: Any, rel: str) -> None:
        path = self.folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(obj, path)
        self.checksums[rel] = file_checksum(path)

    def save_typed(self, name: str, values: dict[Any, Tensor], hetero: bool) -> None:
        if not hetero:
            self.save(values[None], f"{name}.pt")
            return
        for t, value in values.items():
            self.save(value, f"{name}/{type_str(t)}.pt")


def _clean_stale_tmp(root: Path) -> None:
    """Remove tmp folders of interrupted runs (their writer process is gone)."""
    for tmp in root.parent.glob(f"{root.name}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and pid_alive(int(pid)):
            raise PartitionError(
                f"{tmp}: another partitioner (pid {pid}) is writing {root}; wait for it to finish"
            )
        log.warning("removing interrupted partition folder %s", tmp)
        shutil.rmtree(tmp, ignore_errors=True)


def find_existing(root: Path, fingerprint: str, overwrite: bool) -> PartitionMeta | None:
    """The reusable partition at `root`, None if there is none (or it is to be overwritten).

    A partition with another fingerprint, or a folder that is not a complete partition, is
    never silently replaced: that needs `overwrite`. An empty folder (e.g. made for the
    partition, as PyG's users and tests do) holds nothing to lose and is written into.
    """
    _clean_stale_tmp(root)
    if not root.exists() or (root.is_dir() and not any(root.iterdir())):
        return None
    try:
        meta = read_meta(root)
        found = meta.get("fingerprint")
    except PartitionError as err:
        found, meta = f"<not a complete partition: {err}>", None
    if meta is not None and found == fingerprint:
        return PartitionMeta.from_dict(root, meta, reused=True)
    if overwrite:
        return None
    raise PartitionError(
        f"partition.root={root} holds fingerprint {found} but this config needs {fingerprint}; "
        "set partition.overwrite=true to replace it or choose another partition.root"
    )


def _install(tmp: Path, root: Path) -> None:
    """Atomically move the finished tmp folder to `root` (replacing an old one if present)."""
    old = root.parent / f"{root.name}.old-{os.getpid()}"
    if root.exists():
        os.replace(root, old)
    os.replace(tmp, root)
    shutil.rmtree(old, ignore_errors=True)


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def partition_graph(
    data: Any,
    root: str | os.PathLike,
    num_parts: int,
    method: str = "metis",
    recursive: bool = False,
    balance_train: bool = True,
    balance_edges: bool = True,
    relabel: bool = False,
    seed: int = 0,
    fingerprint: str | None = None,
    overwrite: bool = False,
    order: str = "original",
) -> PartitionMeta:
    """Partition `data` (Data or HeteroData) into `num_parts` parts under `root`.

    Reuses an existing complete partition with the same fingerprint (dataset fingerprint +
    these parameters); refuses to replace a different one unless `overwrite`.

    Args:
        order: with `relabel`, "locality" numbers each part's nodes community by community
            (`app.partition.order`) instead of in their original order.
        fingerprint: the dataset's fingerprint (`app.dataset.dataset_fingerprint`); when
            None, a content hash of `data`'s tensors is used instead.
    """
    start = time.perf_counter()
    root = Path(root)
    if order not in ("original", "locality") or (order == "locality" and not relabel):
        raise ValueError(f"order={order!r}: 'original', or 'locality' with relabel=True")
    params = partition_params(
        num_parts, method, recursive, balance_train, balance_edges, relabel, seed, order
    )
    dataset_fp = fingerprint or data_fingerprint(data)
    fp = partition_fingerprint(dataset_fp, **params)
    existing = find_existing(root, fp, overwrite)
    if existing is not None:
        log.info("reusing partition %s (fingerprint %s)", root, fp)
        return existing
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = root.parent / f"{root.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        view = _View.of(data)
        num_classes = checked_num_classes(data, view, root)
        kw = dict(recursive=recursive, balance_train=balance_train, balance_edges=balance_edges)
        flat = _homogeneous(view)
        # the locality order's adjacency; METIS reads the same one instead of building its own
        csr = symmetric_csr(flat[0], flat[2]) if order == "locality" else None
        node_map = _assign(view, flat, num_parts, method, seed=seed, csr=csr, **kw)
        key = {} if csr is None else _locality(view, node_map, flat[1], csr, seed)
        del flat, csr
        meta = _write_all(view, node_map, num_parts, relabel, _Writer(tmp), key)
        meta.update(
            format_version=FORMAT_VERSION,
            fingerprint=fp,
            dataset_fingerprint=dataset_fp,
            params=params,
            method=method,
            relabel=relabel,
            num_classes=num_classes,
        )
        meta["stats"].update(time_s=time.perf_counter() - start, peak_rss_gb=peak_rss_gb())
        (tmp / META_FILE).write_text(json.dumps(meta, indent=1))
        _install(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(format_stats(meta["stats"]), flush=True)
    return PartitionMeta.from_dict(root, read_meta(root), reused=False)


def checked_num_classes(data: Any, view: _View, root: Path) -> int | None:
    """`data`'s declared `num_classes` (None when undeclared: then only the unlabelled rule is
    checked), once every node type's `y` is in range (`app.labels`); `LabelError` if not."""
    declared = getattr(data, "num_classes", None)
    for t in view.nodes:
        y = view.node_attr(t, "y")
        if y is None or y.is_floating_point() or y.numel() != y.size(0):
            continue  # no labels, or not one class per node
        labelled = torch.zeros(y.size(0), dtype=torch.bool)
        for split in SPLITS:
            mask = view.node_attr(t, f"{split}_mask")
            if mask is not None:
                labelled |= mask.bool()
        bound = int(declared) if declared is not None else int(y.max()) + 1 if y.numel() else 0
        where = f"labels y{'' if t is None else f' of {t}'} (partitioning into {root})"
        check_labels(y, bound, where, labelled)
    return None if declared is None else int(declared)


def _write_all(
    view: _View,
    node_map: dict[NodeKey, Tensor],
    num_parts: int,
    relabel: bool,
    out: _Writer,
    key: dict[NodeKey, Tensor],
) -> dict[str, Any]:
    """Write maps and every part; return META.json's content (minus run-level keys).
    `key`: per node type, what relabelling numbers a part's nodes by first (see `_relabel`)."""
    hetero = view.is_hetero
    orig_id: dict[NodeKey, Tensor] = {}
    bounds: dict[NodeKey, list[int]] = {}
    if relabel:
        new_id = {}
        for t, parts in node_map.items():
            new_id[t], orig_id[t], bounds[t] = _relabel(parts, num_parts, key.get(t))
            node_map[t] = parts[orig_id[t]]
        out.save_typed("orig_id", orig_id, hetero)
        out.save_typed("new_id", new_id, hetero)
    rank = {t: _inverse(torch.sort(m, stable=True).indices) for t, m in node_map.items()}
    splits, edge_map, cut = _split_all(view, node_map, rank, new_id if relabel else None)
    out.save_typed("node_map", node_map, hetero)
    out.save_typed("edge_map", edge_map, hetero)
    _save_node_time(view, orig_id, out)
    del edge_map
    owned = {
        t: [torch.nonzero(m == p).view(-1) for p in range(num_parts)] for t, m in node_map.items()
    }
    part_stats = []
    for p in tqdm(range(num_parts), desc="writing parts", unit="part", disable=None):
        part_stats.append(_write_part(view, p, node_map, owned, splits, orig_id, out))
    num_edges = sum(s.src.numel() for s in splits.values())
    return {
        "num_parts": num_parts,
        "is_hetero": hetero,
        "node_types": list(view.nodes) if hetero else None,
        "edge_types": [list(et) for et in view.edges] if hetero else None,
        "node_offset": list(view.offsets().values()) if hetero else None,
        "is_sorted": True,
        "node_bounds": (bounds if hetero else bounds[None]) if relabel else None,
        "num_nodes": view.num_nodes if hetero else view.num_nodes[None],
        "num_edges": num_edges,
        "checksums": out.checksums,
        "stats": {
            "edge_cut": cut,
            "edge_cut_frac": cut / max(num_edges, 1),
            "parts": part_stats,
        },
    }


def _split_all(
    view: _View,
    node_map: dict[NodeKey, Tensor],
    rank: dict[NodeKey, Tensor],
    new_id: dict[NodeKey, Tensor] | None,
) -> tuple[dict[EdgeKey, _EdgeSplit], dict[EdgeKey, Tensor], int]:
    """Order every edge type by (destination part, destination); count cut edges."""
    splits, edge_map, cut = {}, {}, 0
    for et, store in view.edges.items():
        s_t, d_t = view.ends(et)
        src, dst = store.edge_index[0], store.edge_index[1]
        if new_id is not None:
            src, dst = new_id[s_t][src], new_id[d_t][dst]
        edge_map[et] = node_map[d_t][dst]
        cut += int((node_map[s_t][src] != edge_map[et]).sum())
        tie = view.edge_time(et)
        node_time = view.node_attr(s_t, "time")
        if tie is None and node_time is not None:
            orig_src = store.edge_index[0]
            tie = node_time[orig_src]
        order, ptr = _edge_order(rank[d_t][dst], view.num_nodes[d_t], tie)
        size = (view.num_nodes[s_t], view.num_nodes[d_t])
        splits[et] = _EdgeSplit(src, dst, order, ptr, size)
    return splits, edge_map, cut


def _write_part(
    view: _View,
    p: int,
    node_map: dict[NodeKey, Tensor],
    owned: dict[NodeKey, list[Tensor]],
    splits: dict[EdgeKey, _EdgeSplit],
    orig_id: dict[NodeKey, Tensor],
    out: _Writer,
) -> dict[str, int]:
    """Write part p's four files; return its stats row."""
    graph, efeats, halos = {}, {}, {}
    for et, sp in splits.items():
        s_t, d_t = view.ends(et)
        before = sum(len(o) for o in owned[d_t][:p])
        start, end = int(sp.ptr[before]), int(sp.ptr[before + len(owned[d_t][p])])
        eid = sp.order[start:end].clone()
        row, col = sp.src[eid], sp.dst[eid]
        halo = halo_of(row, node_map[s_t], p)
        halos.setdefault(s_t, []).append(halo)
        graph[et] = {
            "row": compact(row, sp.size[0]),
            "col": compact(col, sp.size[1]),
            "edge_id": compact(eid, sp.src.numel()),
            "size": sp.size,
            "colptr": compact(csc_pointer(col, sp.size[1]), row.numel()),
            "halo": compact(halo, sp.size[0]),
        }
        efeats[et] = _edge_feats(view, et, eid)
    nfeats, seeds = {}, {s: {} for s in SPLITS}
    for t in view.nodes:
        ids = owned[t][p]
        orig = orig_id[t][ids] if t in orig_id else ids
        nfeats[t] = _node_feats(view, t, ids, orig, orig_id.get(t))
        for split in SPLITS:
            mask = view.node_attr(t, f"{split}_mask")
            if mask is not None:
                seeds[split][t] = ids[mask[orig]]
    hetero = view.is_hetero
    unwrap = (lambda d: d) if hetero else (lambda d: d[None])
    out.save(unwrap(graph), f"part_{p}/graph.pt")
    out.save(unwrap(nfeats), f"part_{p}/node_feats.pt")
    edge_feats = {k: v for k, v in efeats.items() if v} if hetero else efeats[None]
    out.save(edge_feats, f"part_{p}/edge_feats.pt")
    empty = torch.empty(0, dtype=torch.int64)
    out.save(
        {s: v if hetero else v.get(None, empty) for s, v in seeds.items()}, f"part_{p}/seeds.pt"
    )
    return {
        "part": p,
        "nodes": sum(len(o[p]) for o in owned.values()),
        "edges": sum(g["row"].numel() for g in graph.values()),
        "train": sum(s.numel() for s in seeds["train"].values()),
        "halo": sum(_union_size(h, view.num_nodes[t]) for t, h in halos.items()),
    }


def compact(ids: Tensor, bound: int) -> Tensor:
    """`ids` (values in [0, bound]) as int32 when they fit, else as they are (int64): halves
    the partition's topology (graph.pt) on disk and in every process that maps it."""
    return ids.to(torch.int32) if bound < 2**31 else ids


def _union_size(id_sets: list[Tensor], num_nodes: int) -> int:
    if len(id_sets) == 1:
        return id_sets[0].numel()
    mark = torch.zeros(num_nodes, dtype=torch.bool)
    for ids in id_sets:
        mark[ids] = True
    return int(mark.sum())


def _node_time(view: _View, t: NodeKey) -> Tensor | None:
    """Node time of type t, None when absent (or when a homogeneous graph's time is per edge)."""
    node_time = view.node_attr(t, "time")
    if node_time is not None and (view.is_hetero or view.edge_time(None) is None):
        return node_time
    return None


def _save_node_time(view: _View, orig_id: dict[NodeKey, Tensor], out: _Writer) -> None:
    """The global node time (in write-space ids): a part's edges reach halo sources too, and
    temporal sampling must compare THEIR times with the seed's."""
    times = {}
    for t in view.nodes:
        node_time = _node_time(view, t)
        if node_time is not None:
            times[t] = node_time[orig_id[t]] if t in orig_id else node_time
    if times:
        out.save_typed("node_time", times, view.is_hetero)


def _node_feats(
    view: _View, t: NodeKey, ids: Tensor, orig: Tensor, orig_id: Tensor | None
) -> dict[str, Any]:
    """A part's node rows; `time` is PyG's: every node's time (write-space ids), in each part."""
    feats = {}
    for key in ("x", "y"):
        value = view.node_attr(t, key)
        if value is not None:
            feats[key] = value[orig]
    out: dict[str, Any] = {"global_id": ids, "feats": feats}
    node_time = _node_time(view, t)
    if node_time is not None:
        out["time"] = node_time if orig_id is None else node_time[orig_id]
    return out


def _edge_feats(view: _View, et: EdgeKey, eid: Tensor) -> dict[str, Any]:
    store = view.edges[et]
    num_edges = store.edge_index.size(1)
    feats = {}
    for key in ("edge_attr", "edge_weight"):
        value = getattr(store, key, None)
        if isinstance(value, Tensor) and value.size(0) == num_edges:
            feats[key] = value[eid]
    out: dict[str, Any] = {}
    if feats:
        out.update(global_id=eid, feats=feats)
    edge_time = view.edge_time(et)
    if edge_time is not None:
        out.update(global_id=eid, edge_time=edge_time[eid])
    return out


# ---------------------------------------------------------------- stats


def format_stats(stats: dict[str, Any]) -> str:
    """The stats as a short table: one row per part, then the totals."""
    lines = [f"{'part':>4} {'nodes':>10} {'edges':>12} {'train':>9} {'halo':>10}"]
    for r in stats.get("parts", []):
        lines.append(
            f"{r['part']:>4} {r['nodes']:>10,} {r['edges']:>12,} {r['train']:>9,} {r['halo']:>10,}"
        )
    lines.append(
        f"edge cut {stats.get('edge_cut', 0):,} ({100 * stats.get('edge_cut_frac', 0):.2f} %), "
        f"{stats.get('time_s', 0):.1f} s, peak RSS {stats.get('peak_rss_gb', 0):.2f} GiB"
    )
    return "\n".join(lines)


def stats_for_logging(meta: PartitionMeta | dict[str, Any]) -> dict[str, float]:
    """Flat {name: number} of a partition's stats, for MLflow `log_metrics`."""
    raw = meta.raw if isinstance(meta, PartitionMeta) else meta
    stats = raw.get("stats", {})
    out = {f"partition/{k}": float(v) for k, v in stats.items() if isinstance(v, int | float)}
    out["partition/num_parts"] = float(raw["num_parts"])
    parts = stats.get("parts", [])
    for key in ("nodes", "edges", "train", "halo"):
        values = [r[key] for r in parts]
        for r in parts:
            out[f"partition/part{r['part']}_{key}"] = float(r[key])
        if values and sum(values):
            out[f"partition/{key}_imbalance"] = max(values) * len(values) / sum(values)
    return out
