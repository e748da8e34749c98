"""Toy graphs, a toy loader and a toy config for the model, loop and device tests.

A tiny homophilous graph, sampled hop by hop with a few lines of numpy into PyG's
NeighborLoader layout, so the model and loop tests do not depend on the real sampler.
"""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import Data, HeteroData

from app.config import Config, ModelConfig


def toy_graph(num_nodes: int = 300, num_classes: int = 3, seed: int = 0) -> Data:
    """Classes are communities (95% of edges inside); features are weakly informative."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, num_classes, num_nodes)
    dst = np.repeat(np.arange(num_nodes), 6)
    same = rng.random(len(dst)) < 0.95
    by_class = [np.flatnonzero(y == c) for c in range(num_classes)]
    src = np.array(
        [
            rng.choice(by_class[y[d]]) if s else rng.integers(num_nodes)
            for d, s in zip(dst, same, strict=True)
        ]
    )
    x = np.eye(num_classes)[y] * 0.6 + rng.normal(size=(num_nodes, num_classes))
    x = np.concatenate([x, rng.normal(size=(num_nodes, 5))], axis=1)
    split = rng.permutation(num_nodes)
    masks = [np.zeros(num_nodes, bool) for _ in range(3)]
    masks[0][split[: num_nodes // 2]] = True
    masks[1][split[num_nodes // 2 : 3 * num_nodes // 4]] = True
    masks[2][split[3 * num_nodes // 4 :]] = True
    return Data(
        x=torch.tensor(x, dtype=torch.float32),
        y=torch.from_numpy(y),
        edge_index=torch.from_numpy(np.stack([src, dst])),
        train_mask=torch.from_numpy(masks[0]),
        val_mask=torch.from_numpy(masks[1]),
        test_mask=torch.from_numpy(masks[2]),
        num_classes=num_classes,
    )


def sample(indptr, indices, seeds, fanouts, rng):
    """Directional neighbour sampling without replacement in PyG's hop-ordered layout."""
    local = {int(s): i for i, s in enumerate(seeds)}
    nodes, rows, cols = list(seeds), [], []
    counts, edge_counts, frontier = [len(seeds)], [], list(seeds)
    for k in fanouts:
        new, hop_edges = [], 0
        for v in frontier:
            nbrs = indices[indptr[v] : indptr[v + 1]]
            if len(nbrs) > k:
                nbrs = rng.choice(nbrs, k, replace=False)
            for u in nbrs:
                if int(u) not in local:
                    local[int(u)] = len(nodes)
                    nodes.append(int(u))
                    new.append(int(u))
                rows.append(local[int(u)])
                cols.append(local[int(v)])
                hop_edges += 1
        counts.append(len(new))
        edge_counts.append(hop_edges)
        frontier = new
    edge_index = torch.tensor([rows, cols], dtype=torch.int64).view(2, -1)
    return torch.tensor(nodes), edge_index, counts, edge_counts


class ToyLoader:
    """Batches of `batch_size` seeds from `input_nodes`; `skip` drops the last batches."""

    def __init__(self, data, fanouts, input_nodes, batch_size, shuffle=False, seed=0):
        order = torch.argsort(data.edge_index[1], stable=True)
        self.indices = data.edge_index[0][order].numpy()
        counts = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
        self.indptr = np.concatenate([[0], np.cumsum(counts.numpy())])
        self.data, self.fanouts, self.batch_size = data, fanouts, batch_size
        self.input_nodes = input_nodes
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return -(-len(self.input_nodes) // self.batch_size)

    def __iter__(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        seeds = self.input_nodes.numpy()
        if self.shuffle:
            seeds = rng.permutation(seeds)
        for start in range(0, len(seeds), self.batch_size):
            chunk = seeds[start : start + self.batch_size]
            n_id, ei, counts, ecounts = sample(self.indptr, self.indices, chunk, self.fanouts, rng)
            yield Data(
                x=self.data.x[n_id],
                y=self.data.y[n_id],
                edge_index=ei,
                n_id=n_id,
                batch_size=len(chunk),
                num_sampled_nodes=counts,
                num_sampled_edges=ecounts,
            )


def toy_hetero(num_papers: int = 120, num_authors: int = 60, seed: int = 0) -> HeteroData:
    """Papers (features, labels, masks) cite papers; featureless authors write papers."""
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["paper"].x = torch.randn(num_papers, 6, generator=g)
    data["paper"].y = torch.randint(0, 3, (num_papers,), generator=g)
    mask = torch.zeros(num_papers, dtype=torch.bool)
    data["paper"].train_mask = mask.clone().index_fill_(0, torch.arange(0, num_papers, 2), True)
    data["paper"].val_mask = mask.clone().index_fill_(0, torch.arange(1, num_papers, 4), True)
    data["paper"].test_mask = mask.clone().index_fill_(0, torch.arange(3, num_papers, 4), True)
    data["author"].num_nodes = num_authors
    cites = torch.randint(0, num_papers, (2, 4 * num_papers), generator=g)
    writes = torch.stack(
        [
            torch.randint(0, num_authors, (3 * num_papers,), generator=g),
            torch.randint(0, num_papers, (3 * num_papers,), generator=g),
        ]
    )
    data["paper", "cites", "paper"].edge_index = cites
    data["author", "writes", "paper"].edge_index = writes
    data["paper", "rev_writes", "author"].edge_index = writes.flip(0)
    data.num_classes = 3
    return data


FANOUTS = [5, 5]


def toy_config(seed: int = 0, batch_size: int = 32) -> Config:
    cfg = Config(seed=seed)
    cfg.model = ModelConfig(name="sage", hidden_channels=32, num_layers=2, dropout=0.2)
    cfg.sampler.num_neighbors = list(FANOUTS)
    cfg.loader.batch_size = batch_size
    cfg.train.lr = 0.01
    return cfg
