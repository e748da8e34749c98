"""Rows a GPU trainer holds on its device, so its samplers send only the others.

A trainer of a distributed job reads most of its batches' rows from its own partition and its
node's caches; copying those from host memory (and through its samplers' shared memory) every
batch repeats the same rows. When `train.gpu_feature_bytes` allows, the trainer copies them to
its GPU once, and its samplers send, per batch, only the rows it does not hold plus each
node's slot in its table (`SampledBatch.resident`); the trainer fills the batch on the GPU.

The table (`ResidentRows`) is the first `k` rows of: the partition's owned nodes (highest
in-degree first when not all fit, as a node is drawn once per out-edge and, on the undirected
graphs loaded here, in- and out-degree agree), then the halo cache's rows, then the hot cache's
(`halo_cache`, `hot_cache`). Both sides compute it from the same partition, cache files and
`k` (`SamplerOptions.resident_rows`, sent with every request), so no table crosses a process.
Homogeneous graphs without node times only; every node attribute the sampler gathers is held
(labels and masks too), so a resident node costs the samplers nothing but its slot.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from app.distributed.feature_store import FeatureStoreCore
from app.distributed.graph_store import GraphStoreCore
from app.distributed.halo_cache import HaloCache
from app.sampler.output import MISS, SLOT

log = logging.getLogger("distgnn.train")

BLOCK_ROWS = 1 << 20  # rows per host-to-device copy while the table is built
SLOT_DTYPE = np.int32  # a table row: a GPU holds far fewer than 2**31 rows


def holdable_attrs(fs: FeatureStoreCore) -> list[str]:
    """The node attributes a trainer holds for its samplers: all of them, when the graph is
    homogeneous and every one is stored by row (not by global id, as node times are); else
    none (its batches carry every row)."""
    attrs = fs.row_attrs(None)
    return attrs if not fs.is_hetero and attrs == fs.attr_names(None) else []


class ResidentRows:
    """The first `k` rows of a partition's resident order (see the module docstring)."""

    def __init__(self, fs: FeatureStoreCore, gs: GraphStoreCore, k: int) -> None:
        self.fs = fs
        owned = fs.num_rows(None)
        self.num_owned = min(owned, k)
        self.order: np.ndarray | None = None  # owned rows held, in slot order (None: all)
        self.rank: np.ndarray | None = None  # owned row → its slot, -1 if not held
        if k < owned:
            gid = fs.get_global_id(None)
            assert gid is not None
            colptr, at = gs.csc_numpy(None)[0], gid.numpy()
            degree = colptr[at + 1] - colptr[at]  # in-edges of each owned row
            self.order = np.argsort(-degree, kind="stable")[:k]
            self.rank = np.full(owned, -1, SLOT_DTYPE)
            self.rank[self.order] = np.arange(k)
        self.caches: list[tuple[HaloCache, int, int]] = []  # (cache, first slot, rows held)
        start = self.num_owned
        for cache in fs.caches():
            held = min(cache.num_rows, k - start)
            if held > 0:
                self.caches.append((cache, start, held))
                start += held
        self.num_rows = start
        if start >= np.iinfo(SLOT_DTYPE).max:
            raise ValueError(f"{start} rows to hold: a resident table holds fewer than 2**31")

    def slots(self, ids: np.ndarray) -> np.ndarray:
        """Each global id's row in the table (int32), -1 where it is not held."""
        fs = self.fs
        slot = np.full(ids.shape, -1, SLOT_DTYPE)
        own = np.flatnonzero(fs.owner(ids) == fs.partition_idx)
        rows = fs.local_rows(ids[own])
        slot[own] = rows if self.rank is None else self.rank[rows]
        rest = np.flatnonzero(slot < 0)
        for cache, start, held in self.caches:
            hit, rows = cache.lookup(ids[rest], None)
            kept = rows < held
            slot[rest[np.flatnonzero(hit)[kept]]] = start + rows[kept]
        return slot

    def blocks(self, attr: str, rows: int = BLOCK_ROWS) -> Iterator[Tensor]:
        """The attribute's table rows in slot order, as host blocks of at most `rows` rows
        (views of the partition and the caches, gathers where owned rows are ranked)."""
        own = self.fs.attr(None, attr)
        for i in range(0, self.num_owned, rows):
            if self.order is None:
                yield own[i : i + rows]
            else:
                yield own[torch.from_numpy(self.order[i : i + rows])]
        for cache, _, held in self.caches:
            yield from cache.feats[(None, attr)][:held].split(rows)


class DeviceRows:
    """A trainer's resident table on its device, and the fill of a batch that used it."""

    def __init__(self, index: ResidentRows, attrs: Sequence[str], device: torch.device) -> None:
        self.num_rows, self.device = index.num_rows, device
        self.tables: dict[str, Tensor] = {}
        for a in attrs:
            like = index.fs.attr(None, a)
            table = torch.empty((index.num_rows, *like.shape[1:]), dtype=like.dtype, device=device)
            at = 0
            for block in index.blocks(a):  # copied block by block: no host copy of the table
                table[at : at + block.size(0)] = block.to(device)
                at += block.size(0)
            self.tables[a] = table

    def fill(self, batch: Any) -> None:
        """Replace each held attribute's carried rows by the whole batch's, where the batch
        is: table rows at the nodes' slots, the carried rows at their positions."""
        slot, miss = batch[SLOT], batch[MISS]
        del batch[SLOT], batch[MISS]
        for a, table in self.tables.items():
            full = table.index_select(0, slot)
            full.index_copy_(0, miss, batch[a])
            batch[a] = full


@dataclass
class Tally:
    """Rows of a loader's batches read from the device table, and rows asked for."""

    hits: int = 0
    rows: int = 0

    def add(self, batch: Any) -> None:
        """Count a batch before its copy (host tensors: no device read)."""
        asked = batch[SLOT].numel()
        self.rows += asked
        self.hits += asked - batch[MISS].numel()

    def log(self, what: str, table: DeviceRows) -> None:
        """Log the hit rate since the last line, and start counting again."""
        rate = self.hits / self.rows if self.rows else 1.0
        log.info("%s: %d on %s, hit rate %.3f", what, table.num_rows, table.device, rate)
        self.hits = self.rows = 0
