"""The single-machine 'last' temporal link sampler the distributed one is compared with.

pyg-lib (PyG's temporal hop) is not installable here, so the hop is written from its
definition: of a node's in-edges not later than its tree's time, the `k` latest, oldest first
(PyG sorts its CSC by edge time). `LastLinkSampler` puts it behind PyG's `BaseSampler`, so
PyG's own `LinkNeighborLoader` (its `edge_sample` bookkeeping and its batch filtering) runs on
it as it would on pyg-lib's sampler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch_geometric.data import HeteroData
from torch_geometric.sampler import BaseSampler, EdgeSamplerInput, NegativeSampling
from torch_geometric.sampler.neighbor_sampler import edge_sample

from app.sampler.neighbor import sample_multi_hop_hetero

HopFn = Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]


def last_hop(edge_index: torch.Tensor, edge_time: torch.Tensor) -> HopFn:
    """Hop function: per frontier entry, of its node's in-edges not later than the entry's
    time, the k latest, oldest first (k < 0: all); global edge ids."""
    dst, t_np = edge_index[1].numpy(), edge_time.numpy()
    by_dst = {int(v): np.flatnonzero(dst == v) for v in np.unique(dst)}
    src = edge_index[0].numpy()

    def hop_fn(frontier: Any, k: int, hop: int, time: Any = None) -> tuple:
        picked, counts = [], []
        for v, t in zip(frontier.tolist(), time.tolist(), strict=True):
            ids = by_dst.get(v, np.empty(0, np.int64))
            ids = ids[t_np[ids] <= t]
            ids = ids[np.argsort(t_np[ids], kind="stable")]
            ids = ids if k < 0 else ids[max(0, ids.size - k) :]
            picked.append(ids)
            counts.append(ids.size)
        eids = np.concatenate(picked) if picked else np.empty(0, np.int64)
        return src[eids], eids, np.asarray(counts, np.int64)

    return hop_fn


class LastLinkSampler(BaseSampler):
    """PyG's `edge_sample` over the 'last' hop on a heterogeneous graph whose edges carry
    `edge_time` (disjoint trees, as temporal sampling needs)."""

    def __init__(self, data: HeteroData, num_neighbors: list[int]) -> None:
        self.hops = {e: last_hop(data[e].edge_index, data[e].edge_time) for e in data.edge_types}
        self.num_nodes = {t: data[t].num_nodes for t in data.node_types}
        self.fanout = {e: list(num_neighbors) for e in data.edge_types}

    def _sample(self, seeds: dict, seed_time: dict) -> Any:
        return sample_multi_hop_hetero(seeds, self.fanout, self.hops, self.num_nodes, True,
                                       seed_time)  # fmt: skip

    def sample_from_nodes(self, index: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a link sampler: seeds are links (sample_from_edges)")

    def sample_from_edges(
        self, index: EdgeSamplerInput, neg_sampling: NegativeSampling | None = None
    ) -> Any:
        return edge_sample(index, self._sample, self.num_nodes, True, None, neg_sampling)
