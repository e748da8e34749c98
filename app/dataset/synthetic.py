"""`synthetic_products`: an ogbn-products-like graph generated from a seed.

Recipe (a planted-partition / degree-corrected SBM):

* Nodes fall into `K` communities of log-normally varying size (ids shuffled, as in real data).
* Every node has a power-law (Pareto) weight; an edge picks its first end by weight
  (Chung-Lu), then its other end by weight either inside the first end's community (`INTRA`),
  inside another community with the same label (`SAME_CLASS`), or anywhere. Most edges stay
  inside a community, so METIS cuts few of them; degrees are heavy-tailed.
* Each community has a label; a node keeps it with probability `1 - LABEL_NOISE`.
* Features are the node's class mean plus Gaussian noise strong enough that one node alone is
  ambiguous (an MLP stays far from 100 %), while averaging same-community neighbours denoises
  it, so message passing beats an MLP by a wide margin (like ogbn-products: MLP ~61 %, SAGE ~79 %).

Generation is vectorised numpy in chunks (int32 ids, float32 features) so ogbn-products scale
(2.45M nodes, ~62M directed edges) fits in a few GiB. The pieces are reused by `mag.py`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import Data
from tqdm import tqdm

from app.config import DatasetConfig

log = logging.getLogger(__name__)

INTRA = 0.8  # share of edges inside a community
SAME_CLASS = 0.1  # share of edges to another community with the same label
LABEL_NOISE = 0.15  # chance a node's label is redrawn uniformly instead of its community's
FEATURE_NOISE = 0.38  # noise std per sqrt(F): class means are N(0, 1); Bayes acc ~63 %
POWER_LAW = 2.5  # exponent of the Pareto node weights (degree tail)
MAX_WEIGHT = 100.0  # caps hub weights (= degree relative to the lightest nodes)
MAX_TIME = 10_000  # temporal: node timestamps lie in [0, MAX_TIME)
CHUNK = 1 << 22  # candidate edges generated per vectorised step
FEATURE_ROWS = 1 << 18  # feature rows per step (~100 MB of noise at 100 features)


def num_communities(cfg: DatasetConfig) -> int:
    """`cfg.num_communities`, or ~500 nodes each but at least one per class (>= 8 nodes each)."""
    if cfg.num_communities > 0:
        return min(cfg.num_communities, cfg.num_nodes)
    wanted = max(cfg.num_classes, cfg.num_nodes // 500)
    return max(1, min(wanted, cfg.num_nodes // 8))


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """`np.unique(keys)` of int keys by an in-place sort: numpy >= 2.3 answers a plain
    `np.unique` of integers from a hash table and sorts afterwards, over 100x slower here
    (`keys` is reused: pass a copy to keep it)."""
    keys.sort()
    if keys.size < 2:
        return keys
    keep = np.empty(keys.size, dtype=bool)
    keep[0] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def rngs(seed: int, count: int) -> list[np.random.Generator]:
    """Independent streams, so e.g. the feature count does not change the graph."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(count)]


def assign_communities(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Community of each node (int32), sizes log-normal around n / k, every community used."""
    share = rng.lognormal(0.0, 0.5, k)
    sizes = 1 + np.floor(share / share.sum() * (n - k)).astype(np.int64)
    sizes[: n - int(sizes.sum())] += 1  # flooring leaves < k nodes over: one more each
    return rng.permutation(np.repeat(np.arange(k, dtype=np.int32), sizes))


def power_law_weights(rng: np.random.Generator, n: int) -> np.ndarray:
    """Pareto(POWER_LAW) weights >= 1, capped at MAX_WEIGHT (float64 for exact cumsums)."""
    w = (1.0 - rng.random(n)) ** (-1.0 / (POWER_LAW - 1.0))
    return np.minimum(w, MAX_WEIGHT)


def community_labels(rng: np.random.Generator, k: int, num_classes: int) -> np.ndarray:
    """Label of each community: classes spread evenly over communities, in random order."""
    return rng.permutation(np.arange(k) % num_classes).astype(np.int64)


def noisy_labels(rng: np.random.Generator, base: np.ndarray, num_classes: int) -> np.ndarray:
    """`base` with a LABEL_NOISE share of entries redrawn uniformly over the classes."""
    y = base.astype(np.int64, copy=True)
    flip = rng.random(len(y)) < LABEL_NOISE
    y[flip] = rng.integers(0, num_classes, int(flip.sum()))
    return y


def class_features(
    rng: np.random.Generator,
    y: np.ndarray,
    num_classes: int,
    num_features: int,
    dtype: str = "float32",
) -> np.ndarray:
    """`dtype` [N, F]: class mean (N(0, 1) per class) + Gaussian noise, in chunks.

    The noise std grows with sqrt(F), so the difficulty (Bayes accuracy) does not depend on F.
    Drawn in float32 whatever `dtype` (float16 rounds the same numbers), chunk by chunk, so a
    float16 graph never holds its features in float32 whole.
    """
    sigma = np.float32(FEATURE_NOISE * np.sqrt(num_features))
    means = rng.standard_normal((num_classes, num_features), dtype=np.float32)
    x = np.empty((len(y), num_features), dtype=dtype)
    chunks = range(0, len(y), FEATURE_ROWS)
    for lo in tqdm(chunks, desc="features", unit="chunk", leave=False, disable=len(chunks) < 2):
        hi = min(lo + FEATURE_ROWS, len(y))
        noise = rng.standard_normal((hi - lo, num_features), dtype=np.float32)
        noise *= sigma
        noise += means[y[lo:hi]]
        x[lo:hi] = noise
    return x


def split_masks(
    rng: np.random.Generator, n: int, train_frac: float, val_frac: float, test_frac: float = 0.0
) -> dict[str, np.ndarray]:
    """Disjoint random train / val / test boolean masks (test: `test_frac` of the nodes, or the
    rest when 0; papers100M-like splits leave most nodes unlabelled for training purposes)."""
    perm = rng.permutation(n)
    n_train = max(1, int(n * train_frac))  # tiny graphs still get a training node
    n_val = min(int(n * val_frac), n - n_train)
    end = n if test_frac <= 0 else min(n, n_train + n_val + max(1, int(n * test_frac)))
    parts = {"train": perm[:n_train], "val": perm[n_train : n_train + n_val]}
    parts["test"] = perm[n_train + n_val : end]
    masks = {}
    for name, idx in parts.items():
        masks[f"{name}_mask"] = np.zeros(n, dtype=bool)
        masks[f"{name}_mask"][idx] = True
    return masks


def community_times(rng: np.random.Generator, comm: np.ndarray, max_time: int) -> np.ndarray:
    """int64 timestamps: a community is born at a random time, its nodes arrive after it."""
    k = int(comm.max()) + 1
    birth = rng.integers(0, int(max_time * 0.7), k)
    spread = rng.exponential(max_time * 0.1, len(comm))
    return np.minimum(birth[comm] + spread.astype(np.int64), max_time - 1)


@dataclass
class WeightedPicker:
    """Draws nodes with probability ∝ weight, globally or inside given communities.

    Nodes are sorted by community; one cumulative weight array over that order turns both
    draws into a `searchsorted` of uniform numbers scaled into the right weight interval.
    """

    order: np.ndarray  # node ids sorted by community
    cum: np.ndarray  # cumulative weight along `order` (float64)
    cum_start: np.ndarray  # [K + 1]: cumulative weight before each community

    @classmethod
    def build(cls, comm: np.ndarray, weight: np.ndarray, k: int) -> WeightedPicker:
        order = np.argsort(comm, kind="stable").astype(np.int32)
        cum = np.cumsum(weight[order])
        start = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(np.bincount(comm, minlength=k), out=start[1:])
        cum_start = np.concatenate([[0.0], cum])[start]
        return cls(order, cum, cum_start)

    def _pick(self, lo: np.ndarray, width: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        query = lo + rng.random(len(lo)) * width
        # Sorted queries walk `cum` in order: cache-friendly, many times faster at scale.
        by_query = np.argsort(query)
        pos = np.empty(len(query), dtype=np.int64)
        pos[by_query] = np.searchsorted(self.cum, query[by_query], side="right")
        return self.order[np.minimum(pos, len(self.order) - 1)]

    def anywhere(self, rng: np.random.Generator, n: int) -> np.ndarray:
        query = np.sort(rng.random(n)) * self.cum[-1]  # sorted: see `_pick`
        pos = np.searchsorted(self.cum, query, side="right")
        picked = self.order[np.minimum(pos, len(self.order) - 1)]
        rng.shuffle(picked)  # i.i.d. draws again, so they can be paired with other draws
        return picked

    def within(self, rng: np.random.Generator, comms: np.ndarray) -> np.ndarray:
        """One node per entry of `comms`; communities without nodes fall back to anywhere."""
        lo, hi = self.cum_start[comms], self.cum_start[comms + 1]
        empty = hi <= lo
        lo[empty], hi[empty] = 0.0, self.cum[-1]
        return self._pick(lo, hi - lo, rng)


def same_class_community(
    rng: np.random.Generator, comms: np.ndarray, comm_label: np.ndarray
) -> np.ndarray:
    """For each community in `comms`, a random community carrying the same label."""
    by_label = np.argsort(comm_label, kind="stable")
    count = np.bincount(comm_label)
    first = np.cumsum(count) - count
    label = comm_label[comms]
    return by_label[first[label] + (rng.random(len(comms)) * count[label]).astype(np.int64)]


def sample_pairs(
    rng: np.random.Generator,
    n_edges: int,
    picker: WeightedPicker,
    comm: np.ndarray,
    comm_label: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """`n_edges` candidate (u, v) pairs (int32, may repeat or be loops) of the mixed model."""
    u = picker.anywhere(rng, n_edges)
    cu = comm[u].astype(np.int64)
    kind = rng.random(n_edges)
    target = np.where(kind < INTRA, cu, same_class_community(rng, cu, comm_label))
    v = picker.within(rng, target)
    wild = kind >= INTRA + SAME_CLASS
    v[wild] = picker.anywhere(rng, int(wild.sum()))
    return u, v


def undirected_keys(
    rng: np.random.Generator,
    n: int,
    n_edges: int,
    picker: WeightedPicker,
    comm: np.ndarray,
    comm_label: np.ndarray,
) -> np.ndarray:
    """Sorted unique `min*n + max` keys of `n_edges` distinct node pairs without loops.

    Draws candidates in chunks, dedupes, tops up the shortfall (hubs produce duplicates), then
    drops a random surplus so the count is exact (short only for nearly complete graphs).
    """
    keys = np.empty(0, dtype=np.int64)
    yield_rate = 0.9  # share of fresh candidates that survive dedup: re-estimated each round
    for _ in range(20):
        need = n_edges - len(keys)
        if need <= 0:
            break
        todo = int(need / max(yield_rate, 0.05) * 1.05) + 16
        parts = [keys]
        bar = tqdm(total=todo, desc="edges", unit_scale=True, leave=False, disable=todo <= CHUNK)
        for lo in range(0, todo, CHUNK):
            size = min(CHUNK, todo - lo)
            u, v = sample_pairs(rng, size, picker, comm, comm_label)
            u, v = u[u != v].astype(np.int64), v[u != v].astype(np.int64)
            parts.append(np.minimum(u, v) * n + np.maximum(u, v))
            bar.update(size)
        bar.close()
        before = len(keys)
        keys = sorted_unique(np.concatenate(parts))
        del parts
        yield_rate = (len(keys) - before) / todo
    if len(keys) > n_edges:
        keep = np.sort(rng.choice(len(keys), n_edges, replace=False))
        keys = keys[keep]
    return keys


def symmetric_edge_index(keys: np.ndarray, n: int) -> np.ndarray:
    """int64 [2, 2 * len(keys)]: both directions of each undirected key, sorted by source."""
    both = np.concatenate([keys, (keys % n) * n + keys // n])
    both.sort()
    edge_index = np.empty((2, len(both)), dtype=np.int64)
    np.floor_divide(both, n, out=edge_index[0])
    np.remainder(both, n, out=edge_index[1])
    return edge_index


def generate_products(cfg: DatasetConfig, seed: int) -> dict:
    """Plain-tensor dict of a synthetic_products graph (see `load_dataset` for the layout)."""
    n, k = cfg.num_nodes, num_communities(cfg)
    g_struct, g_edges, g_labels, g_feat, g_split, g_time = rngs(seed, 6)
    comm = assign_communities(g_struct, n, k)
    comm_label = community_labels(g_struct, k, cfg.num_classes)
    picker = WeightedPicker.build(comm, power_law_weights(g_struct, n), k)
    max_pairs = n * (n - 1) // 2
    n_pairs = min(int(round(n * cfg.avg_degree / 2)), max_pairs)
    keys = undirected_keys(g_edges, n, n_pairs, picker, comm, comm_label)
    del picker
    edge_index = symmetric_edge_index(keys, n)
    del keys
    y = noisy_labels(g_labels, comm_label[comm], cfg.num_classes)
    out = {
        "kind": "homo",
        "num_classes": cfg.num_classes,
        "x": torch.from_numpy(
            class_features(g_feat, y, cfg.num_classes, cfg.num_features, cfg.feature_dtype)
        ),
        "y": torch.from_numpy(y),
        "edge_index": torch.from_numpy(edge_index),
    }
    for name, mask in split_masks(g_split, n, cfg.train_frac, cfg.val_frac, cfg.test_frac).items():
        out[name] = torch.from_numpy(mask)
    if cfg.temporal:
        out["time"] = torch.from_numpy(community_times(g_time, comm, MAX_TIME))
    return out


def to_data(obj: dict) -> Data:
    """Build a homogeneous `Data` from the plain dict (tensors + `num_classes`)."""
    data = Data(**{k: v for k, v in obj.items() if k not in ("kind", "num_classes")})
    data.num_classes = int(obj["num_classes"])
    return data
