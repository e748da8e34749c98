"""A static cache of the hottest remote nodes' features, sized in bytes (PaGraph / GNNLab).

The halo cache (`halo_cache`) holds the remote nodes this partition's own in-edges reach: the
first hop's. Deeper hops run on the owners and reach their nodes' in-neighbours, which no
partition can rank from its own edges; a node is reached there about as often as it is an
in-neighbour, i.e. by its out-degree. Each owner knows its nodes' in-degrees (its CSC), which
on an undirected graph (products, papers as loaded) are those out-degrees, so the cache asks
every peer once for its `k` highest in-degree nodes (endpoint `hot_nodes`), merges the answers
by degree (ties: node type order, then id), leaves out what the halo cache already holds, and
keeps the top rows that fit `hot_cache_bytes` (a row's bytes: every attribute it caches).

Filled once per partition, cache size and halo size, like the halo cache and through the same
code (`halo_cache.load_checked_or_fill`): one process of the node fills it by RPC and writes
`<root>/cache/hot_p<part>_<bytes>_h<halo rows>.pt` with its checksum; every process hashes the
file before it maps it and rebuilds one that does not match. Ranking over RPC rather than at
partition time keeps the partition format (and every written partition) as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from app.distributed import rpc
from app.distributed.halo_cache import HaloCache, fetch_rows, load_checked_or_fill, rank_halo


def hot_nodes(graph_store: Any, group: Any, k: int) -> tuple[Tensor, Tensor]:
    """(ids, in-degrees) of this partition's `k` owned nodes of type `group` with the most
    in-edges (every edge type ending there), highest first, ties by id; none of degree 0."""
    keys = (
        [et for et in graph_store.edge_types if et[2] == group] if graph_store.is_hetero else [None]
    )
    degree: np.ndarray | None = None
    for et in keys:
        d = np.diff(graph_store.csc_numpy(et)[0]).astype(np.int64)  # colptr: by global dst id
        degree = d if degree is None else _add(degree, d)
    if degree is None or k <= 0:
        return torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64)
    top = np.argsort(-degree, kind="stable")[:k]
    top = top[degree[top] > 0]
    return torch.from_numpy(top.astype(np.int64)), torch.from_numpy(degree[top])


def _add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise sum of two degree arrays of possibly different lengths."""
    out = np.zeros(max(a.size, b.size), np.int64)
    out[: a.size] += a
    out[: b.size] += b
    return out


def choose(
    candidates: dict[Any, tuple[np.ndarray, np.ndarray]],
    exclude: dict[Any, np.ndarray],
    row_bytes: dict[Any, int],
    budget: int,
) -> dict[Any, np.ndarray]:
    """Per node type, the sorted ids of the highest-degree `candidates` ((ids, degrees) per
    type) not in `exclude`, as many as fit `budget` bytes at `row_bytes` per row of a type."""
    flat = []
    for n, (group, (ids, deg)) in enumerate(candidates.items()):
        keep = ~np.isin(ids, exclude.get(group, np.empty(0, np.int64)))
        size = np.full(int(keep.sum()), row_bytes[group])
        flat.append((group, ids[keep], deg[keep], np.full(size.size, n), size))
    if not flat:
        return {}
    ids, deg, kind, size = (np.concatenate([f[i] for f in flat]) for i in range(1, 5))
    rank = np.lexsort((ids, kind, -deg))  # degree first, then type order, then id
    chosen = rank[np.cumsum(size[rank]) <= budget]
    out = {}
    for n, (group, *_rest) in enumerate(flat):
        mine = np.sort(ids[chosen[kind[chosen] == n]])
        if mine.size:
            out[group] = mine
    return out


def cache_path(root: Path, part: int, nbytes: int, halo_rows: int) -> Path:
    return Path(root) / "cache" / f"hot_p{part}_{nbytes}_h{halo_rows}.pt"


def load_or_fill(
    feature_store: Any, graph_store: Any, nbytes: int, halo_rows: int, timeout_s: float
) -> HaloCache:
    """The node's hot cache of at most `nbytes` bytes beside a halo cache of `halo_rows` rows:
    mapped from its file, or filled (and written)."""
    root = feature_store.root
    part = graph_store.partition_idx
    path = None if root is None else cache_path(root, part, nbytes, halo_rows)
    return load_checked_or_fill(
        path, lambda: _fill(feature_store, graph_store, nbytes, halo_rows), timeout_s
    )


def _fill(feature_store: Any, graph_store: Any, nbytes: int, halo_rows: int) -> HaloCache:
    groups = [g for g in feature_store.node_groups() if feature_store.row_nbytes(g)]
    row_bytes = {g: feature_store.row_nbytes(g) for g in groups}
    halo = rank_halo(graph_store, halo_rows) if halo_rows else {}
    candidates = {}
    for g in groups:
        k = nbytes // row_bytes[g] + int(halo.get(g, np.empty(0)).size)
        peers = [p for p in range(feature_store.num_partitions) if p != feature_store.partition_idx]
        calls = [rpc.call_partition(feature_store.router, p, "hot_nodes", (g, k)) for p in peers]
        answers = [c.wait() for c in calls]
        ids = np.concatenate([a[0].numpy() for a in answers] or [np.empty(0, np.int64)])
        deg = np.concatenate([a[1].numpy() for a in answers] or [np.empty(0, np.int64)])
        candidates[g] = (ids, deg)
    return fetch_rows(feature_store, choose(candidates, halo, row_bytes, nbytes))
