"""DistNeighborSampler on one partition, in process: what it keeps between batches."""

from __future__ import annotations

import torch
from torch_geometric.data import Data

from app.distributed.sampler import DistNeighborSampler
from app.distributed.server import load_stores
from app.partition.writer import partition_graph


def test_relabelers_are_reused_across_batches(tmp_path):
    """A batch takes a relabeler (a dense O(N) map) from the free list and gives it back reset:
    the next batch reuses that object instead of allocating N entries again, and draws the same
    sample as a sampler that never sampled before."""
    n = 300
    gen = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(n, 4, generator=gen), num_nodes=n,
                edge_index=torch.randint(0, n, (2, 5 * n), generator=gen))  # fmt: skip
    partition_graph(data, tmp_path / "p", 1, method="random")
    stores = load_stores(str(tmp_path / "p"), 0)
    sampler = DistNeighborSampler(stores, [4, 3])
    sampler.prepare(1)
    pooled = sampler._free[None][-1]
    seeds = torch.arange(0, n, 7)
    first = sampler.sample_from_nodes(seeds, seed=5)
    assert sampler._free[None] == [pooled]  # the same object came back, nothing new made
    again = sampler.sample_from_nodes(seeds, seed=5)
    assert sampler._free[None] == [pooled] and len(pooled) == 0  # reset on return
    fresh = DistNeighborSampler(stores, [4, 3]).sample_from_nodes(seeds, seed=5)
    for out in (again, fresh):
        assert torch.equal(out.node, first.node) and torch.equal(out.row, first.row)
        assert torch.equal(out.col, first.col) and torch.equal(out.edge, first.edge)
