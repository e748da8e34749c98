"""`partition.method=stream`: partition a chunked on-disk graph under a memory budget.

Only O(N) state lives in memory (node -> part, vertex weights, degrees); edges are streamed
from the chunked graph (`app.dataset.chunked`) in passes:

1. Degrees: one pass; vertex weights = node + training-seed + in-degree terms, the same
   combined weight the METIS path balances (`assign.vertex_weights`).
2. Coarsening (multilevel, the idea of ParMETIS / Armada's GREM at one level): a few passes
   of size-constrained label propagation merge each node into the cluster most of its
   neighbours are in (clusters capped at 1/CLUSTERS_PER_PART of a part's weight); one pass
   aggregates the cut edges into a weighted cluster graph, O(clusters + cluster pairs), which
   METIS partitions in memory; every node takes its cluster's part. When clustering does not
   shrink the graph enough for the budget, the nodes are instead placed by one streamed LDG
   pass (Stanton & Kliot's linear deterministic greedy).
3. Refinement: `refine_passes` restreaming LDG passes (Nishimura & Ugander, KDD'13): each
   node is taken out and placed again in the part q maximising `|N(v) ∩ q| * (1 - load_q /
   cap)` among parts with room (cap = (1 + IMBALANCE) x mean load), i.e. where most of its
   neighbours are, within the balance.
   Neighbour lists come straight from the chunks when the graph is source-sorted and
   symmetric (the synthetic generator's output), else from a one-off bucketed spill of both
   edge directions (O(bucket) memory, 16 bytes per edge of temporary disk).
4. Writing: the SAME layout as `writer.partition_graph` (see its docstring): node_map.pt,
   edge_map.pt, part_<i>/{graph,node_feats,edge_feats,seeds}.pt, META.json last, checksums,
   tmp folder + atomic rename. Part i is assembled from one pass over the edge chunks keeping
   the edges it owns, so no process ever holds more than one part's edges.

With `relabel`, nodes are renumbered as `writer.partition_graph` numbers them (part p owns new
ids [node_bounds[p], node_bounds[p+1]), in original order or, with `order="locality"`, community
by community): the communities come from `app.partition.order`'s label propagation run along
the streamed neighbour lists instead of an in-memory adjacency (each node visited in id order,
not a seeded random order, so the communities differ from the in-memory writer's), O(N) memory.

Homogeneous graphs (node time supported; validated in `app.config`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import time
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numba
import numpy as np
import torch
from tqdm import tqdm

from app.contract import SPLITS
from app.dataset.chunked import CHUNK_EDGES, CHUNK_NODES, Buckets, ChunkedGraph
from app.labels import check_labels
from app.partition.order import MAX_SIZE, SWEEPS
from app.partition.reader import (
    FORMAT_VERSION,
    META_FILE,
    PartitionError,
    csc_pointer,
    file_checksum,
    halo_of,
    read_meta,
)
from app.partition.writer import (
    PartitionMeta,
    _install,
    _relabel,
    _Writer,
    find_existing,
    format_stats,
    peak_rss_gb,
)

log = logging.getLogger("distgnn")

IMBALANCE = 0.05  # allowed excess of a part's weight over the mean (METIS' default is 0.03)
CLUSTERS_PER_PART = 64  # clusters are capped at 1/64 of a part's weight
CLUSTER_PASSES = 3  # label-propagation passes (each one streams every edge)
SPILL_KEYS = 1 << 23  # keys per spill bucket when neighbour lists must be regrouped
GIB = 2**30
BASELINE_GB = 0.5  # peak RSS of a process that imported torch, PyG, numba and ran numba code


# ---------------------------------------------------------------- memory model


def own_peak_rss_gb() -> float:
    """Peak resident memory of this process image (VmHWM), in GiB.

    Unlike `ru_maxrss`, which after fork + exec starts from the PARENT's resident size at the
    fork (a partitioner spawned by a big process would report the parent's memory), VmHWM
    counts only this image's pages. Falls back to `peak_rss_gb` where /proc is missing.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return peak_rss_gb()


def stream_memory_gb(
    num_nodes: int,
    num_edges: int,
    num_parts: int,
    num_features: int,
    spill: bool = True,
    relabel: bool = False,
) -> float:
    """Estimated peak of `stream_partition` (GiB): O(N) arrays + one part's edges and rows.

    ~64 B per node (maps, weights, degrees, labels, masks, CSC pointer), ~64 B per edge of the
    largest part (row/col/edge id, sort order, sorted copies), its feature rows, the pages of
    one chunk of each stream (edge_map.pt is written block by block: `save_streamed`), and the
    interpreter with torch, numba and pymetis loaded (BASELINE_GB). `relabel` adds the id maps
    and their sort temporaries (~48 B per node; the locality labels are freed before) and a
    second copy of a part's rows (gathered in original order, stored in the new one).
    """
    part_edges = num_edges / num_parts * (1 + IMBALANCE)
    part_rows = num_nodes / num_parts * (1 + IMBALANCE)
    rows = (2 if relabel else 1) * part_rows + min(num_nodes, CHUNK_NODES)
    per_node = 64 + (48 if relabel else 0)
    total = per_node * num_nodes + 64 * part_edges + 4 * num_features * rows + 8 * CHUNK_EDGES
    if spill:  # neighbour lists regrouped: one sorted bucket of keys and its quotients
        total += 3 * 8 * min(SPILL_KEYS, 2 * num_edges)
    return BASELINE_GB + total / GIB


def stream_disk_bytes(
    num_nodes: int,
    num_edges: int,
    num_parts: int,
    num_features: int,
    spill: bool = True,
    relabel: bool = False,
    temporal: bool = False,
) -> int:
    """Estimated peak disk of `stream_partition` (its tmp folder, then the partition).

    The parts' row / col / edge id (int64) and `edge_map.pt`: 32 B per edge; per part a CSC
    pointer over every node id (8 B per node and part) and, temporal, every node's time; the
    features (float32), labels, ids and node map: 4 F + 24 B per node; `relabel` adds the two
    id maps. The neighbour spill (`spill`: 2 x 8 B per edge) is removed before the parts are
    written, so the peak is the larger of the two.
    """
    per_node = 4 * num_features + 24 + (16 if relabel else 0) + 8 * num_parts
    if temporal:
        per_node += 8 * (num_parts + 1)
    written = 32 * num_edges + per_node * num_nodes
    return max(written, 16 * num_edges if spill else 0)


def metis_memory_gb(num_nodes: int, num_edges: int, num_features: int) -> float:
    """Estimated peak of the METIS path (GiB), fitted to ogbn-products scale: 2.45M nodes,
    61.9M edges, 100 features -> 7.99 GiB measured (graph in memory + CSR + METIS)."""
    return (120 * num_edges + 4 * num_features * num_nodes) / GIB


# ---------------------------------------------------------------- streamed assignment


@numba.njit(cache=True)
def _place_runs(src, dst, part, load, weight, cap, counts):
    """Place every node of the source-grouped edge run (src sorted); see the module docstring."""
    num_parts = load.size
    i = 0
    while i < src.size:
        v = src[i]
        j = i
        counts[:] = 0
        while j < src.size and src[j] == v:
            u = dst[j]
            if u != v and part[u] >= 0:
                counts[part[u]] += 1
            j += 1
        if part[v] >= 0:
            load[part[v]] -= weight[v]
        best, best_score, best_load = -1, -1.0, np.inf
        for q in range(num_parts):
            if load[q] + weight[v] > cap:
                continue
            score = counts[q] * (1.0 - load[q] / cap)
            if score > best_score or (score == best_score and load[q] < best_load):
                best, best_score, best_load = q, score, load[q]
        if best < 0:  # no part has room (a huge vertex): the lightest one
            best = np.argmin(load)
        part[v] = best
        load[best] += weight[v]
        i = j


@numba.njit(cache=True)
def _place_isolated(part, load, weight):
    """Nodes without any edge: to the lightest part each."""
    for v in range(part.size):
        if part[v] < 0:
            q = np.argmin(load)
            part[v] = q
            load[q] += weight[v]


def neighbour_runs(graph: ChunkedGraph, spill: Buckets | None) -> Iterator[tuple]:
    """(src, dst) blocks grouped by source, no source split across blocks (int64)."""
    if spill is None:
        blocks = ((src, dst) for _, src, dst in graph.edge_chunks())
    else:
        n = graph.num_nodes
        blocks = ((k // n, k % n) for k in (np.sort(spill.read(b)) for b in range(spill.count)))
    carry_src = carry_dst = np.empty(0, np.int64)
    for src, dst in blocks:
        src = np.concatenate([carry_src, np.asarray(src, np.int64)])
        dst = np.concatenate([carry_dst, np.asarray(dst, np.int64)])
        if src.size == 0:
            continue
        cut = int(np.searchsorted(src, src[-1]))
        carry_src, carry_dst = src[cut:], dst[cut:]
        yield src[:cut], dst[:cut]
    if carry_src.size:
        yield carry_src, carry_dst


def spill_neighbours(graph: ChunkedGraph, folder: Path) -> Buckets:
    """Both directions of every edge as `src * n + dst` keys, bucketed by source range."""
    n = graph.num_nodes
    spill = Buckets(folder, n, max(1, -(-2 * graph.num_edges // SPILL_KEYS)))
    for _, src, dst in graph.edge_chunks():
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        spill.spill(src * n + dst, src)
        spill.spill(dst * n + src, dst)
    return spill


def vertex_weight(graph: ChunkedGraph, balance_train: bool, balance_edges: bool) -> np.ndarray:
    """float64 [N]: 1 per node (+ N/T per training node) (+ N/E per in-edge), like METIS'."""
    n = graph.num_nodes
    weight = np.ones(n)
    train = graph.node_array("train_mask")
    if balance_train and train is not None and train.any():
        weight += train * (n / int(train.sum()))
    if balance_edges and graph.num_edges:
        deg = np.zeros(n, np.int64)
        for _, _, dst in graph.edge_chunks():
            deg += np.bincount(dst, minlength=n)
        weight += deg * (n / graph.num_edges)
    return weight


@numba.njit(cache=True)
def _cluster_runs(src, dst, cluster, size, weight, max_size, count):
    """Size-constrained label propagation over source-grouped runs: each node joins the
    cluster most of its neighbours are in, if that cluster has room (`count`: zeroed scratch)."""
    i = 0
    while i < src.size:
        v = src[i]
        j = i
        while j < src.size and src[j] == v:
            count[cluster[dst[j]]] += 1
            j += 1
        own = cluster[v]
        best, best_count = own, count[own]
        for k in range(i, j):
            c = cluster[dst[k]]
            if count[c] > best_count and size[c] + weight[v] <= max_size:
                best, best_count = c, count[c]
        for k in range(i, j):
            count[cluster[dst[k]]] = 0
        if best != own:
            size[own] -= weight[v]
            size[best] += weight[v]
            cluster[v] = best
        i = j


def coarse_graph(
    graph: ChunkedGraph, cluster: np.ndarray, num_clusters: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR (xadj, adjncy, edge weights) of the cluster graph: one streamed pass over edges."""
    keys = np.empty(0, np.int64)
    counts = np.empty(0, np.int64)
    for _, src, dst in graph.edge_chunks():
        cs, cd = cluster[src], cluster[dst]
        cross = cs != cd
        cs, cd = cs[cross], cd[cross]
        new = np.minimum(cs, cd) * num_clusters + np.maximum(cs, cd)
        keys, inverse = np.unique(np.concatenate([keys, new]), return_inverse=True)
        counts = np.bincount(
            inverse,
            weights=np.concatenate([counts, np.ones(len(new), np.int64)]),
            minlength=len(keys),
        ).astype(np.int64)
    lo, hi = keys // num_clusters, keys % num_clusters
    src = np.concatenate([lo, hi])
    order = np.argsort(src, kind="stable")
    xadj = np.zeros(num_clusters + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=num_clusters), out=xadj[1:])
    return xadj, np.concatenate([hi, lo])[order], np.concatenate([counts, counts])[order]


def multilevel_start(
    graph: ChunkedGraph,
    spill: Buckets | None,
    weight: np.ndarray,
    num_parts: int,
    seed: int,
    memory_budget_gb: float | None,
) -> np.ndarray | None:
    """Initial parts from METIS on the label-propagation cluster graph (None: too coarse a
    reduction for the budget, then LDG alone places the nodes)."""
    import pymetis

    n = graph.num_nodes
    cluster = np.arange(n, dtype=np.int64)
    size = weight.copy()
    max_size = weight.sum() / (num_parts * CLUSTERS_PER_PART)
    count = np.zeros(n, np.int64)
    for _ in tqdm(range(CLUSTER_PASSES), desc="stream: clustering", unit="pass", disable=None):
        for src, dst in neighbour_runs(graph, spill):
            _cluster_runs(src, dst, cluster, size, weight, max_size, count)
    del count, size
    ids, cluster = np.unique(cluster, return_inverse=True)
    num_clusters = len(ids)
    budget_nodes = (memory_budget_gb or np.inf) * GIB / 200  # ~200 B per coarse vertex + edges
    if num_clusters > max(n / 4, 1) and num_clusters > budget_nodes:
        log.info("stream: %d clusters from %d nodes: too many for METIS, LDG only", num_clusters, n)
        return None
    xadj, adjncy, eweights = coarse_graph(graph, cluster, num_clusters)
    cweight = np.rint(np.bincount(cluster, weights=weight, minlength=num_clusters) * 8)
    log.info("stream: METIS on %d clusters, %d coarse edges", num_clusters, len(adjncy) // 2)
    _, parts = pymetis.part_graph(
        num_parts,
        pymetis.CSRAdjacency(xadj, adjncy),
        vweights=cweight.astype(np.int64),
        eweights=eweights,
        options=pymetis.Options(seed=seed),
    )
    return np.asarray(parts, dtype=np.int64)[cluster]


def stream_assign(
    graph: ChunkedGraph,
    spill: Buckets | None,
    num_parts: int,
    refine_passes: int,
    balance_train: bool,
    balance_edges: bool,
    seed: int = 0,
    memory_budget_gb: float | None = None,
) -> np.ndarray:
    """int64 [N] part of every node: METIS on a clustered graph (else one LDG pass), then
    `refine_passes` restreaming passes (`spill`: the regrouped neighbour lists, or None)."""
    weight = vertex_weight(graph, balance_train, balance_edges)
    cap = (1 + IMBALANCE) * weight.sum() / num_parts
    part = None
    if num_parts > 1:
        part = multilevel_start(graph, spill, weight, num_parts, seed, memory_budget_gb)
    if part is None:
        part = np.full(graph.num_nodes, -1, np.int64)
        refine_passes += 1
    load = np.bincount(part[part >= 0], weights=weight[part >= 0], minlength=num_parts)
    counts = np.zeros(num_parts, np.int64)
    for _ in tqdm(range(refine_passes), desc="stream: refining", unit="pass", disable=None):
        for src, dst in neighbour_runs(graph, spill):
            _place_runs(src, dst, part, load, weight, cap, counts)
        _place_isolated(part, load, weight)
    return part


@numba.njit(cache=True)
def _community_runs(src, dst, part, label, size, max_size, count):
    """`app.partition.order`'s label propagation over source-grouped runs: each node takes the
    label most of its same-part neighbours carry, if that community has fewer than `max_size`
    nodes (a tie keeps its label; `count`: zeroed scratch)."""
    i = 0
    while i < src.size:
        v = src[i]
        p = part[v]
        j = i
        while j < src.size and src[j] == v:
            if part[dst[j]] == p:
                count[label[dst[j]]] += 1
            j += 1
        own = label[v]
        best, best_count = own, count[own]
        for k in range(i, j):
            if part[dst[k]] == p:
                c = label[dst[k]]
                if count[c] > best_count and size[c] < max_size:
                    best, best_count = c, count[c]
        for k in range(i, j):
            count[label[dst[k]]] = 0
        if best != own:
            size[own] -= 1
            size[best] += 1
            label[v] = best
        i = j


def stream_locality(graph: ChunkedGraph, spill: Buckets | None, part: np.ndarray) -> np.ndarray:
    """int64 [N] community of every node (`partition.order=locality`), from SWEEPS streamed
    passes of label propagation along same-part edges, communities capped at MAX_SIZE nodes."""
    n = graph.num_nodes
    label = np.arange(n, dtype=np.int64)
    size = np.ones(n, np.int64)
    count = np.zeros(n, np.int64)
    for _ in tqdm(range(SWEEPS), desc="stream: locality order", unit="pass", disable=None):
        for src, dst in neighbour_runs(graph, spill):
            _community_runs(src, dst, part, label, size, MAX_SIZE, count)
    return label


@dataclass
class Relabel:
    """`partition.relabel`: every node's new id and back, and the parts' new-id ranges."""

    new_id: np.ndarray  # int64 [N]: original id -> new id
    orig_id: np.ndarray  # int64 [N]: new id -> original id
    bounds: list[int]  # part p owns new ids [bounds[p], bounds[p + 1])

    @classmethod
    def of(cls, part: np.ndarray, num_parts: int, key: np.ndarray | None) -> Relabel:
        """The writer's numbering (`writer._relabel`): by part, then `key`, then original id."""
        k = None if key is None else torch.from_numpy(key)
        new_id, orig_id, bounds = _relabel(torch.from_numpy(part), num_parts, k)
        return cls(new_id.numpy(), orig_id.numpy(), bounds)

    def owned(self, p: int) -> np.ndarray:
        """Original ids of part p's nodes, in new-id order."""
        return self.orig_id[self.bounds[p] : self.bounds[p + 1]]


# ---------------------------------------------------------------- writing


def save_streamed(out: _Writer, rel: str, size: int, blocks: Iterator[np.ndarray]) -> None:
    """`torch.save` file of an int64 [size] tensor whose data arrive in `blocks`, never whole.

    torch.save of an untouched `torch.empty` writes the archive around zero pages (never
    resident); the data record is then overwritten in place block by block and its CRC-32
    patched in the record's data descriptor and central directory entry, so the file is the
    one torch.save would have written for the full tensor (loads with or without mmap).
    """
    path = out.folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(torch.empty(size, dtype=torch.int64), path)
    with zipfile.ZipFile(path) as zf:
        record = next(i for i in zf.infolist() if i.filename.endswith("/data/0"))
        central = zf.start_dir
    with open(path, "r+b") as fh:
        fh.seek(record.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", fh.read(4))
        fh.seek(record.header_offset + 30 + name_len + extra_len)
        crc, written = 0, 0
        for block in blocks:
            data = np.ascontiguousarray(block, dtype=np.int64).data
            crc = zlib.crc32(data, crc)
            written += fh.write(data)
        if written != 8 * size or fh.read(4) != b"PK\x07\x08":
            raise PartitionError(f"{path}: streamed {written} bytes into a {8 * size}-byte record")
        fh.write(struct.pack("<I", crc))  # the data descriptor's CRC-32
        _patch_central_crc(fh, central, record.filename.encode(), crc)
    out.checksums[rel] = file_checksum(path)


def _patch_central_crc(fh: Any, offset: int, name: bytes, crc: int) -> None:
    """Set the CRC-32 of zip entry `name` in the central directory starting at `offset`."""
    while True:
        fh.seek(offset)
        head = fh.read(46)
        if head[:4] != b"PK\x01\x02":
            raise PartitionError(f"zip entry {name!r} not in the central directory")
        name_len, extra_len, comment_len = struct.unpack("<HHH", head[28:34])
        if fh.read(name_len) == name:
            fh.seek(offset + 16)
            fh.write(struct.pack("<I", crc))
            return
        offset += 46 + name_len + extra_len + comment_len


def _edge_map(graph: ChunkedGraph, part: np.ndarray, out: _Writer) -> int:
    """Write edge_map.pt (edge -> part of its destination) chunk by chunk; the edge cut."""
    cut = 0

    def blocks() -> Iterator[np.ndarray]:
        nonlocal cut
        for _, src, dst in graph.edge_chunks():
            dst_part = part[dst]
            cut += int(np.count_nonzero(part[src] != dst_part))
            yield dst_part

    save_streamed(out, "edge_map.pt", graph.num_edges, blocks())
    return cut


def _owned_edges(
    graph: ChunkedGraph,
    part: np.ndarray,
    p: int,
    node_time: np.ndarray | None,
    ids: Relabel | None,
) -> tuple[torch.Tensor, ...]:
    """(row, col, edge_id) int64 of the edges whose destination part p owns, CSC-ordered
    (by destination, ties by source time when the graph has one, then by edge id: the order
    `writer.partition_graph` writes); row / col in new ids with `ids`."""
    rows, cols, eids = [], [], []
    for start, src, dst in graph.edge_chunks():
        keep = np.flatnonzero(part[dst] == p)
        rows.append(src[keep].astype(np.int64))
        cols.append(dst[keep].astype(np.int64))
        eids.append(keep + start)
    row, col, eid = (torch.from_numpy(np.concatenate(a)) for a in (rows, cols, eids))
    if node_time is not None:  # by the time of the (original) source
        pre = torch.sort(torch.from_numpy(node_time[row.numpy()]), stable=True).indices
        row, col, eid = row[pre], col[pre], eid[pre]
    if ids is not None:
        new_id = torch.from_numpy(ids.new_id)
        row, col = new_id[row], new_id[col]
    order = torch.sort(col, stable=True).indices
    return row[order], col[order], eid[order]


def _owned_rows(graph: ChunkedGraph, name: str, orig: np.ndarray) -> np.ndarray:
    """Rows `orig` of node array `name` in that order (`gather_rows` wants them sorted)."""
    if orig.size < 2 or bool((orig[1:] >= orig[:-1]).all()):
        return graph.gather_rows(name, orig)
    order = np.argsort(orig, kind="stable")
    rows = graph.gather_rows(name, orig[order])
    out = np.empty_like(rows)
    out[order] = rows
    return out


def _write_part(
    graph: ChunkedGraph,
    part: np.ndarray,
    node_map: torch.Tensor,
    node_data: dict[str, np.ndarray],
    p: int,
    out: _Writer,
    ids: Relabel | None,
) -> dict[str, int]:
    """Write part p's four files; return its stats row (the writer's keys). `part`,
    `node_data`: by original id; `node_map`: by written id (new ids with `ids`)."""
    n = graph.num_nodes
    row, col, eid = _owned_edges(graph, part, p, node_data.get("time"), ids)
    halo = halo_of(row, node_map, p)
    colptr = csc_pointer(col, n)
    out.save(
        {"row": row, "col": col, "edge_id": eid, "size": (n, n), "colptr": colptr, "halo": halo},
        f"part_{p}/graph.pt",
    )
    num_edges = row.numel()
    del row, col, eid, colptr
    if ids is None:
        orig = np.flatnonzero(part == p)
        written = torch.from_numpy(orig)
    else:
        orig = ids.owned(p)
        written = torch.arange(ids.bounds[p], ids.bounds[p + 1])
    feats = {}
    if "x" in graph.node_names:
        feats["x"] = torch.from_numpy(_owned_rows(graph, "x", orig))
    if "y" in node_data:
        feats["y"] = torch.from_numpy(node_data["y"][orig])
    nfeats = {"global_id": written, "feats": feats}
    if "time" in node_data:  # PyG's: every node's time, by written id
        node_time = node_data["time"]
        nfeats["time"] = torch.from_numpy(node_time if ids is None else node_time[ids.orig_id])
    out.save(nfeats, f"part_{p}/node_feats.pt")
    out.save({}, f"part_{p}/edge_feats.pt")
    seeds = {}
    for split in SPLITS:
        mask = node_data.get(f"{split}_mask")
        seeds[split] = written[torch.from_numpy(mask[orig])] if mask is not None else written[:0]
    out.save(seeds, f"part_{p}/seeds.pt")
    return {
        "part": p,
        "nodes": len(orig),
        "edges": num_edges,
        "train": seeds["train"].numel(),
        "halo": halo.numel(),
    }


def quality_stats(stats: dict[str, Any]) -> dict[str, float]:
    """Balance (max part / mean part) of nodes, edges, training nodes, and the halo fraction
    (halo nodes of all parts / nodes): derived from a META.json `stats` of ANY method."""
    parts = stats.get("parts", [])
    num_nodes = sum(r["nodes"] for r in parts)
    out: dict[str, float] = {}
    for key in ("nodes", "edges", "train"):
        values = [r[key] for r in parts]
        if values and sum(values):
            out[f"{key}_imbalance"] = max(values) * len(values) / sum(values)
    out["halo_frac"] = sum(r["halo"] for r in parts) / max(num_nodes, 1)
    return out


def checked_num_classes(graph: ChunkedGraph) -> int | None:
    """The manifest's `num_classes` (None when it has none), once every label `y` is in range
    and no node of a split is unlabelled (`app.labels`); `LabelError` names the y chunks."""
    num_classes = graph.manifest.get("num_classes")
    y = graph.node_array("y")
    if y is None or num_classes is None:
        return num_classes
    labelled = np.zeros(len(y), bool)
    for split in SPLITS:
        mask = graph.node_array(f"{split}_mask")
        if mask is not None:
            labelled |= mask.astype(bool)
    check_labels(y, int(num_classes), graph.root / "nodes" / "y", labelled)
    return int(num_classes)


def stream_partition(
    graph: ChunkedGraph,
    root: str | os.PathLike,
    num_parts: int,
    *,
    params: dict[str, Any],
    fingerprint: str,
    dataset_fingerprint: str,
    refine_passes: int = 3,
    balance_train: bool = True,
    balance_edges: bool = True,
    memory_budget_gb: float | None = None,
    seed: int = 0,
    overwrite: bool = False,
    relabel: bool = False,
    order: str = "original",
) -> PartitionMeta:
    """Partition the chunked `graph` into `num_parts` parts under `root` (writer's layout).

    Args:
        params / fingerprint: the partition parameters and their fingerprint (META.json).
        memory_budget_gb: refuse up front when the estimated peak exceeds it.
        relabel / order: as `writer.partition_graph`'s (contiguous new ids per part; with
            "locality", numbered community by community).
    """
    if order not in ("original", "locality") or (order == "locality" and not relabel):
        raise ValueError(f"order={order!r}: 'original', or 'locality' with relabel=True")
    start = time.perf_counter()
    root = Path(root)
    existing = find_existing(root, fingerprint, overwrite)
    if existing is not None:
        log.info("reusing partition %s (fingerprint %s)", root, fingerprint)
        return existing
    n, num_edges = graph.num_nodes, graph.num_edges
    if not 1 <= num_parts <= max(n, 1):
        raise PartitionError(f"partition.num_parts={num_parts}: need 1 <= num_parts <= {n} nodes")
    spill = not (graph.sorted_by_src and graph.symmetric)
    need = stream_memory_gb(n, num_edges, num_parts, graph.num_features, spill, relabel)
    if memory_budget_gb is not None and need > memory_budget_gb:
        raise PartitionError(
            f"partition.memory_budget_gb={memory_budget_gb}: streaming {n:,} nodes / "
            f"{num_edges:,} edges into {num_parts} parts needs ~{need:.1f} GiB; raise "
            "partition.num_parts (one part's edges must fit) or the budget"
        )
    num_classes = checked_num_classes(graph)
    log.info(
        "stream partitioning %s: %d parts, estimated peak %.2f GiB", graph.root, num_parts, need
    )
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = root.parent / f"{root.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        spill_bk = spill_neighbours(graph, tmp / "spill") if spill else None
        part = stream_assign(
            graph,
            spill_bk,
            num_parts,
            refine_passes,
            balance_train,
            balance_edges,
            seed,
            memory_budget_gb,
        )
        ids = None
        if relabel:
            key = stream_locality(graph, spill_bk, part) if order == "locality" else None
            ids = Relabel.of(part, num_parts, key)
            del key
        if spill_bk is not None:
            shutil.rmtree(spill_bk.folder, ignore_errors=True)
        out = _Writer(tmp)
        if ids is not None:
            out.save(torch.from_numpy(ids.orig_id), "orig_id.pt")
            out.save(torch.from_numpy(ids.new_id), "new_id.pt")
        node_map = torch.from_numpy(part if ids is None else part[ids.orig_id])
        out.save(node_map, "node_map.pt")
        cut = _edge_map(graph, part, out)
        names = ("y", "time", *(f"{s}_mask" for s in SPLITS))
        node_data = {k: graph.node_array(k) for k in names}
        node_data = {k: v for k, v in node_data.items() if v is not None}
        if "time" in node_data:  # temporal sampling reads the time of halo sources too
            node_time = node_data["time"] if ids is None else node_data["time"][ids.orig_id]
            out.save(torch.from_numpy(node_time), "node_time.pt")
        rows = [
            _write_part(graph, part, node_map, node_data, p, out, ids)
            for p in tqdm(range(num_parts), desc="writing parts", unit="part", disable=None)
        ]
        stats = {"edge_cut": cut, "edge_cut_frac": cut / max(num_edges, 1), "parts": rows}
        stats |= quality_stats(stats)
        stats |= {"passes": 1 + refine_passes, "estimated_peak_gb": need}
        stats |= {"time_s": time.perf_counter() - start, "peak_rss_gb": own_peak_rss_gb()}
        meta = {
            "num_parts": num_parts,
            "is_hetero": False,
            "node_types": None,
            "edge_types": None,
            "node_offset": None,
            "is_sorted": True,
            "node_bounds": None if ids is None else ids.bounds,
            "num_nodes": n,
            "num_edges": num_edges,
            "checksums": out.checksums,
            "stats": stats,
            "format_version": FORMAT_VERSION,
            "fingerprint": fingerprint,
            "dataset_fingerprint": dataset_fingerprint,
            "params": params,
            "method": "stream",
            "relabel": relabel,
            "num_classes": num_classes,
        }
        (tmp / META_FILE).write_text(json.dumps(meta, indent=1))
        _install(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(format_stats(stats), flush=True)
    return PartitionMeta.from_dict(root, read_meta(root), reused=False)
