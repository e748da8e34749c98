"""DistNeighborSampler / DistNeighborLoader on one partition, in process: what they keep and
start ahead between batches and epochs."""

from __future__ import annotations

import torch
from torch_geometric.data import Data

from app.distributed import DistNeighborLoader
from app.distributed.sampler import DistNeighborSampler, SamplerOptions
from app.distributed.server import load_stores
from app.partition.writer import partition_graph


def _stores(root):
    n = 300
    gen = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(n, 4, generator=gen), num_nodes=n,
                edge_index=torch.randint(0, n, (2, 5 * n), generator=gen))  # fmt: skip
    partition_graph(data, root, 1, method="random")
    return load_stores(str(root), 0), n


def test_relabelers_are_reused_across_batches(tmp_path):
    """A batch takes a relabeler (a dense O(N) map) from the free list and gives it back reset:
    the next batch reuses that object instead of allocating N entries again, and draws the same
    sample as a sampler that never sampled before."""
    stores, n = _stores(tmp_path / "p")
    sampler = DistNeighborSampler(stores, options=SamplerOptions([4, 3]))
    sampler.prepare(1)
    pooled = sampler._free[None][-1]
    seeds = torch.arange(0, n, 7)
    first = sampler.sample_from_nodes(seeds, seed=5)
    assert sampler._free[None] == [pooled]  # the same object came back, nothing new made
    again = sampler.sample_from_nodes(seeds, seed=5)
    assert sampler._free[None] == [pooled] and len(pooled) == 0  # reset on return
    fresh = DistNeighborSampler(stores, options=SamplerOptions([4, 3])).sample_from_nodes(
        seeds, seed=5
    )
    for out in (again, fresh):
        assert torch.equal(out.node, first.node) and torch.equal(out.row, first.row)
        assert torch.equal(out.col, first.col) and torch.equal(out.edge, first.edge)


def _epoch(loader) -> list[torch.Tensor]:
    return [batch.n_id for batch in loader]


def test_prefetched_batches_are_the_epochs_own(tmp_path):
    """`prefetch` starts the next epoch's first batches; that epoch is then the one a loader
    that never prefetched yields. Prefetched for epoch 0 but resumed at epoch 2 (the counter
    moved), they are dropped and epoch 2 comes out right; a prefetch never used is collected
    by `close`."""
    stores, n = _stores(tmp_path / "p")
    opts = dict(input_nodes=torch.arange(n), batch_size=32, shuffle=True, concurrency=3, seed=4)

    def loader():
        return DistNeighborLoader(stores, [3, 2], **opts)

    plain, ahead = loader(), loader()
    ahead.prefetch()
    assert ahead._ahead is not None and len(ahead._ahead[1]) == 3
    want = [_epoch(plain), _epoch(plain), _epoch(plain)]
    got = _epoch(ahead)
    assert ahead._ahead is None and len(got) == len(want[0])
    assert all(torch.equal(a, b) for a, b in zip(got, want[0], strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(want[1], want[0], strict=True))
    resumed = loader()
    resumed.prefetch()
    resumed.epoch = 2
    assert all(torch.equal(a, b) for a, b in zip(_epoch(resumed), want[2], strict=True))
    unused = loader()
    unused.prefetch()
    unused.close()
    assert unused._ahead is None
    for done in (plain, ahead, resumed):
        done.close()
