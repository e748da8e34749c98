"""Sampling fixtures shared by the CPU and CUDA tests of the torch sampler: a graph without
parallel edges, and the validity check of a sample in the numba kernel's layout."""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import Data


def simple_graph(num_nodes: int = 400, seed: int = 0) -> Data:
    """A random graph without self-loops or parallel edges, in-degrees 0 to ~30."""
    rng = np.random.default_rng(seed)
    deg = rng.integers(0, 30, num_nodes)
    deg[:5] = 0
    src, dst = [], []
    for v, d in enumerate(deg):
        nbrs = rng.choice(np.delete(np.arange(num_nodes), v), d, replace=False)
        src.extend(nbrs)
        dst.extend([v] * d)
    ei = torch.tensor(np.array([src, dst]), dtype=torch.int64)
    x = torch.randn(num_nodes, 8)
    return Data(edge_index=ei, x=x, y=torch.randint(0, 3, (num_nodes,)), num_nodes=num_nodes)


def check_valid_sample(data, seeds, fanouts, out) -> None:
    """Every edge exists with its id; no neighbour twice per node; min(k, degree) per node;
    seeds first, then each hop's new nodes, each once, in order of first appearance."""
    node, row, col, eid, nsn, nse = out
    ei = data.edge_index
    assert torch.equal(ei[:, eid], torch.stack([node[row], node[col]]))
    deg = torch.bincount(ei[1], minlength=data.num_nodes)
    assert torch.equal(node[: len(seeds)], seeds)
    assert node[len(seeds) :].unique().numel() == node.numel() - len(seeds)
    assert not torch.isin(node[len(seeds) :], seeds).any()
    assert sum(nsn) == node.numel() and sum(nse) == row.numel() == col.numel()
    begin, end, e0 = 0, nsn[0], 0
    for hop, k in enumerate(fanouts):
        r, c = row[e0 : e0 + nse[hop]], col[e0 : e0 + nse[hop]]
        assert bool((c[1:] >= c[:-1]).all()) and (c.numel() == 0 or begin <= int(c.min()))
        counts = torch.bincount(c - begin, minlength=end - begin)
        assert torch.equal(counts, deg[node[begin:end]].clamp(max=k))
        pairs = c * data.num_nodes + node[r]
        assert pairs.unique().numel() == pairs.numel()  # no neighbour twice for one frontier entry
        new = r[r >= end]
        if new.numel():  # new local ids appear in increasing order of first appearance
            first = torch.tensor(
                [int((new == i).nonzero()[0]) for i in range(end, end + nsn[hop + 1])]
            )
            assert bool((first[1:] > first[:-1]).all())
        begin, end, e0 = end, end + nsn[hop + 1], e0 + nse[hop]
