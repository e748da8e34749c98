"""A cache of the remote (halo) node features that sampling from this partition reaches most.

Every hop from an owned node draws among its in-neighbours, so a halo node is reached about as
often as it appears among the partition's in-edges: halo nodes are ranked by that count (their
in-degree from owned nodes, ties by id) and the top `rows` are cached. The cache is filled ONCE
per partition and cache size, by the first process of the node that needs it (under a file
lock), with one batched fetch from the owners, and written next to the partition
(`<root>/cache/halo_p<part>_<rows>.pt`, atomically, with its checksum beside it); every process of the node then maps that
file, so the rows are held once per node in the shared page cache. `FeatureStoreCore.fetch`
serves cached rows before it asks any remote owner for the rest. Each process hashes the
file before it maps it: one that does not match its checksum (bit rot, an edit, a cache
written before checksums) is rebuilt, with a warning line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from app.fsutil import file_lock
from app.partition.reader import checksum_problem, save_checked

log = logging.getLogger("distgnn")

FILL_CHUNK = 65536  # rows per remote fetch while filling (bounded RPC messages)


@dataclass
class HaloCache:
    """Cached rows of one partition's most-sampled halo nodes, per node type."""

    ids: dict[Any, np.ndarray]  # node type -> sorted global ids
    feats: dict[tuple[Any, str], Tensor]  # (node type, attr) -> rows in `ids` order

    def lookup(self, ids: np.ndarray, group: Any) -> tuple[np.ndarray, np.ndarray]:
        """(mask of `ids` that are cached, their cache rows)."""
        cached = self.ids.get(group)
        if cached is None or cached.size == 0 or ids.size == 0:
            return np.zeros(ids.shape, bool), np.empty(0, np.int64)
        pos = np.minimum(np.searchsorted(cached, ids), cached.size - 1)
        hit = cached[pos] == ids
        return hit, pos[hit]

    def rows(self, group: Any, attr: str) -> np.ndarray:
        return self.feats[(group, attr)].numpy()

    @property
    def num_rows(self) -> int:
        return sum(int(a.size) for a in self.ids.values())


def rank_halo(graph_store: Any, rows: int) -> dict[Any, np.ndarray]:
    """Per node type, the (sorted) ids of the `rows` halo nodes with most in-edges to owned
    nodes; `rows` is shared between node types by that same count."""
    counts: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
    keys = graph_store.edge_types if graph_store.is_hetero else [None]
    for et in keys:
        src = et[0] if et is not None else None
        row = graph_store.csc_numpy(et)[1]
        remote = row[graph_store.owner(row, src) != graph_store.partition_idx]
        ids, n = np.unique(remote.astype(np.int64, copy=False), return_counts=True)
        if src in counts:  # a source type of several edge types: add the counts up
            ids, inv = np.unique(np.concatenate([counts[src][0], ids]), return_inverse=True)
            n = np.bincount(inv, np.concatenate([counts[src][1], n])).astype(np.int64)
        counts[src] = (ids, n)
    flat = [(t, ids, n) for t, (ids, n) in counts.items()]
    if not flat:
        return {}
    all_n = np.concatenate([n for _, _, n in flat])
    keep = np.zeros(all_n.size, bool)
    keep[np.argsort(-all_n, kind="stable")[:rows]] = True  # stable: ties by type, then id
    out, start = {}, 0
    for t, ids, n in flat:
        chosen = ids[keep[start : start + n.size]]
        start += n.size
        if chosen.size:
            out[t] = chosen
    return out


def cache_path(root: Path, part: int, rows: int) -> Path:
    return Path(root) / "cache" / f"halo_p{part}_{rows}.pt"


def load_or_fill(
    feature_store: Any, graph_store: Any, root: Path | None, rows: int, timeout_s: float
) -> HaloCache:
    """The node's halo cache of `rows` rows: mapped from its file, or filled (and written)."""
    path = None if root is None else cache_path(root, graph_store.partition_idx, rows)
    return load_checked_or_fill(path, lambda: _fill(feature_store, graph_store, rows), timeout_s)


def load_checked_or_fill(
    path: Path | None, fill: Callable[[], HaloCache], timeout_s: float
) -> HaloCache:
    """The cache at `path` if it matches its checksum, else `fill()`ed and written there (by
    one process of the node, under a file lock); filled privately when `path` is None (an
    in-memory store)."""
    if path is None:
        return fill()
    if checksum_problem(path):
        with file_lock(path.with_suffix(".lock"), timeout_s, "a process filling a feature cache"):
            problem = checksum_problem(path)  # another process may have filled it meanwhile
            if problem:
                if path.exists():
                    log.warning("feature cache %s: %s; rebuilding it", path, problem)
                save_checked(_to_file(fill()), path)
    return _from_file(torch.load(path, weights_only=True, mmap=True))


def fetch_rows(feature_store: Any, ids: dict[Any, np.ndarray]) -> HaloCache:
    """A cache of `ids` (per node type), their rows fetched from the owners in bounded
    chunks, bypassing every cache."""
    feats = {}
    for group, gids in ids.items():
        attrs = feature_store.attr_names(group)
        parts = [
            feature_store.fetch(torch.from_numpy(gids[i : i + FILL_CHUNK]), group, attrs, False)
            for i in range(0, gids.size, FILL_CHUNK)
        ]
        for a in attrs:
            feats[(group, a)] = torch.cat([p[a] for p in parts])
    return HaloCache(ids, feats)


def _fill(feature_store: Any, graph_store: Any, rows: int) -> HaloCache:
    return fetch_rows(feature_store, rank_halo(graph_store, rows))


def _to_file(cache: HaloCache) -> dict[str, Any]:
    """A `weights_only`-loadable dict (node type None is stored as the empty string)."""
    return {
        "ids": {g or "": torch.from_numpy(v) for g, v in cache.ids.items()},
        "feats": {f"{g or ''}/{a}": t for (g, a), t in cache.feats.items()},
    }


def _from_file(obj: dict[str, Any]) -> HaloCache:
    ids = {(g or None): t.numpy() for g, t in obj["ids"].items()}
    feats = {}
    for key, t in obj["feats"].items():
        g, _, a = key.rpartition("/")
        feats[(g or None, a)] = t
    return HaloCache(ids, feats)
