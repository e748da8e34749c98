"""`synthetic_products` generated straight into the chunked format, never holding the edge list.

It produces the SAME graph as `synthetic.generate_products` for the same config and seed
(identical edges in identical order, identical features, labels and masks): it draws the same
random numbers in the same order and replaces each whole-array step by a bucketed one.

* Dedup: candidate keys `min * n + max` are spilled to `B` bucket files by the range of their
  smaller end (key order = bucket order), and each bucket is deduplicated on its own; the
  counts, hence the top-up rounds, are those of the global `sorted_unique`.
* Trim: the surplus is dropped with the same `rng.choice` over the global sorted order (its
  int64 index array, 8 bytes per undirected edge, is the largest single allocation).
* Symmetrise: both directions are spilled to buckets by SOURCE range; sorting one bucket at a
  time yields the globally source-sorted `edge_index`, written chunk by chunk.

Memory: O(N) node arrays + one bucket (~`BUCKET_KEYS` keys) + one feature chunk; disk: about
2 x 8 bytes per directed edge of spill files, next to the output, removed at the end.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from app.config import DatasetConfig
from app.dataset.chunked import CHUNK_EDGES, Buckets, ChunkedWriter, disk_bytes
from app.dataset.synthetic import (
    CHUNK,
    FEATURE_NOISE,
    FEATURE_ROWS,
    MAX_TIME,
    WeightedPicker,
    assign_communities,
    community_labels,
    community_times,
    noisy_labels,
    num_communities,
    power_law_weights,
    rngs,
    sample_pairs,
    sorted_unique,
    split_masks,
)

log = logging.getLogger(__name__)

BUCKET_KEYS = 1 << 23  # target keys per bucket (64 MiB of int64; ~2x that while deduplicating)
# Peak RSS model of `generate_products_chunked` (average degree 25, 100 features), fitted to
# peaks measured in fresh processes (`python -m bench.partition --estimates`, and the README's
# 2.45M-node point): 250k nodes 0.90 GiB, 500k 1.06, 1M 1.22, 2.45M 1.45. The interpreter and a
# feature chunk; one bucket being deduplicated (~40 B per key, up to BUCKET_KEYS keys); the
# O(N) node arrays; the trim step's index, 8 bytes per undirected edge.
GEN_BASE_GB = 0.75
GEN_BYTES_PER_BUCKET_KEY = 40
GEN_BYTES_PER_NODE = 70
GEN_BYTES_PER_PAIR = 8


def chunked_generation_gb(num_nodes: int, avg_degree: float) -> float:
    """Estimated peak (GiB) of generating `synthetic_products` straight into chunks."""
    pairs = num_nodes * avg_degree / 2
    bucket = GEN_BYTES_PER_BUCKET_KEY * min(pairs, BUCKET_KEYS)
    nodes = GEN_BYTES_PER_NODE * num_nodes
    return GEN_BASE_GB + (bucket + nodes + GEN_BYTES_PER_PAIR * pairs) / 2**30


def _dedup_round(buckets: Buckets) -> list[int]:
    """Sort + dedupe every bucket in place; the unique count of each."""
    counts = []
    for b in range(buckets.count):
        keys = sorted_unique(buckets.read(b))
        buckets.write(b, keys)
        counts.append(len(keys))
    return counts


def undirected_buckets(
    rng: np.random.Generator,
    n: int,
    n_edges: int,
    picker: WeightedPicker,
    comm: np.ndarray,
    comm_label: np.ndarray,
    buckets: Buckets,
) -> list[int]:
    """`synthetic.undirected_keys`, its sorted unique keys left in `buckets`; the counts."""
    counts = [0] * buckets.count
    yield_rate = 0.9
    for _ in range(20):
        need = n_edges - sum(counts)
        if need <= 0:
            break
        todo = int(need / max(yield_rate, 0.05) * 1.05) + 16
        bar = tqdm(total=todo, desc="edges", unit_scale=True, leave=False, disable=todo <= CHUNK)
        for lo in range(0, todo, CHUNK):
            size = min(CHUNK, todo - lo)
            u, v = sample_pairs(rng, size, picker, comm, comm_label)
            u, v = u[u != v].astype(np.int64), v[u != v].astype(np.int64)
            low = np.minimum(u, v)
            buckets.spill(low * n + np.maximum(u, v), low)
            bar.update(size)
        bar.close()
        before = sum(counts)
        counts = _dedup_round(buckets)
        yield_rate = (sum(counts) - before) / todo
    total = sum(counts)
    if total > n_edges:
        keep = np.sort(rng.choice(total, n_edges, replace=False))
        offset = 0
        for b in range(buckets.count):
            lo, hi = np.searchsorted(keep, [offset, offset + counts[b]])
            buckets.write(b, buckets.read(b)[keep[lo:hi] - offset])
            offset += counts[b]
            counts[b] = int(hi - lo)
        del keep
    return counts


def write_symmetric_edges(
    n: int, undirected: Buckets, directed: Buckets, out: ChunkedWriter
) -> None:
    """Both directions of every key, sorted by (source, target), appended chunk by chunk."""
    for b in range(undirected.count):
        keys = undirected.read(b)
        lo, hi = keys // n, keys % n
        directed.spill(keys, lo)
        directed.spill(hi * n + lo, hi)
        undirected.path(b).unlink(missing_ok=True)
    for b in range(directed.count):
        keys = directed.read(b)
        keys.sort()
        for s in range(0, len(keys), CHUNK_EDGES):
            part = keys[s : s + CHUNK_EDGES]
            out.add_edges(part // n, part % n)
        directed.path(b).unlink(missing_ok=True)


def write_features(
    rng: np.random.Generator,
    y: np.ndarray,
    num_classes: int,
    num_features: int,
    out: ChunkedWriter,
    dtype: str = "float32",
) -> None:
    """`synthetic.class_features`, each FEATURE_ROWS block written (as `dtype`) as it is drawn."""
    sigma = np.float32(FEATURE_NOISE * np.sqrt(num_features))
    means = rng.standard_normal((num_classes, num_features), dtype=np.float32)
    for lo in range(0, len(y), FEATURE_ROWS):
        hi = min(lo + FEATURE_ROWS, len(y))
        noise = rng.standard_normal((hi - lo, num_features), dtype=np.float32)
        noise *= sigma
        noise += means[y[lo:hi]]
        out.add_nodes("x", noise.astype(dtype, copy=False))


def num_directed_edges(cfg: DatasetConfig) -> int:
    """Edges of the generated graph: both directions of each undirected pair."""
    n = cfg.num_nodes
    return 2 * min(int(round(n * cfg.avg_degree / 2)), n * (n - 1) // 2)


def generation_disk_bytes(cfg: DatasetConfig) -> int:
    """Peak disk of `generate_products_chunked`: the chunked graph, plus its spill files
    (~2 x 8 bytes per directed edge, beside it until the end)."""
    e = num_directed_edges(cfg)
    return disk_bytes(cfg.num_nodes, e, cfg.num_features, cfg.temporal) + 16 * e


def generate_products_chunked(cfg: DatasetConfig, seed: int, root: str | os.PathLike) -> Path:
    """Write `synthetic.generate_products(cfg, seed)` to the chunked graph folder `root`."""
    start = time.perf_counter()
    root = Path(root)
    n, k = cfg.num_nodes, num_communities(cfg)
    g_struct, g_edges, g_labels, g_feat, g_split, g_time = rngs(seed, 6)
    comm = assign_communities(g_struct, n, k)
    comm_label = community_labels(g_struct, k, cfg.num_classes)
    picker = WeightedPicker.build(comm, power_law_weights(g_struct, n), k)
    n_pairs = min(int(round(n * cfg.avg_degree / 2)), n * (n - 1) // 2)
    spill = root.parent / f"{root.name}.spill-{os.getpid()}"
    count = max(1, -(-n_pairs // BUCKET_KEYS))
    try:
        with ChunkedWriter(root, n) as out:
            undirected = Buckets(spill / "undirected", n, count)
            undirected_buckets(g_edges, n, n_pairs, picker, comm, comm_label, undirected)
            del picker
            write_symmetric_edges(n, undirected, Buckets(spill / "directed", n, 2 * count), out)
            y = noisy_labels(g_labels, comm_label[comm], cfg.num_classes)
            write_features(g_feat, y, cfg.num_classes, cfg.num_features, out, cfg.feature_dtype)
            out.add_nodes("y", y)
            for name, mask in split_masks(
                g_split, n, cfg.train_frac, cfg.val_frac, cfg.test_frac
            ).items():
                out.add_nodes(name, mask)
            if cfg.temporal:
                out.add_nodes("time", community_times(g_time, comm, MAX_TIME))
            out.finish(symmetric=True, num_classes=cfg.num_classes)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    log.info("generated chunked %s in %.1fs", root, time.perf_counter() - start)
    return root
