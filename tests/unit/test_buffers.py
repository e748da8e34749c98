"""`BufferPool`: a loader's gathers reuse a buffer only once no batch holds a view of it, so
batches kept by their consumer are never overwritten."""

from __future__ import annotations

import gc

import pytest
import torch

from app.loader import NeighborLoader
from app.sampler.buffers import BufferPool
from tests.helpers.toy import toy_graph, toy_hetero


def test_a_dropped_buffer_is_reused_a_held_one_is_not():
    pool = BufferPool(keep=2)
    a = pool.rows("x", 100, (4,), torch.float32)
    ptr = a.data_ptr()
    view = a[10:20].view(-1)  # a torch view keeps the buffer too
    del a
    b = pool.rows("x", 100, (4,), torch.float32)
    assert b.data_ptr() != ptr
    del view
    gc.collect()
    c = pool.rows("x", 90, (4,), torch.float32)
    assert c.data_ptr() == ptr and c.shape == (90, 4)


def test_buffers_grow_stay_bounded_and_keep_dtypes():
    pool = BufferPool(keep=1)
    small = pool.rows("n", 10, (), torch.int64)
    ptr = small.data_ptr()
    del small
    big = pool.rows("n", 1000, (), torch.int64)  # too small a buffer is replaced
    assert big.data_ptr() != ptr and big.shape == (1000,)
    extra = pool.rows("n", 5, (), torch.int64)  # the kept one is held: a fresh, unkept buffer
    assert extra.data_ptr() != big.data_ptr()
    assert pool.rows("m", 3, (2,), torch.bool).dtype == torch.bool
    assert pool.rows("b", 3, (2,), torch.bfloat16).dtype == torch.bfloat16  # numpy has none: fresh


def test_bad_keep_is_refused():
    with pytest.raises(ValueError, match="keep=0"):
        BufferPool(keep=0)


@pytest.mark.parametrize("threads", [0, 2])
def test_kept_batches_are_not_overwritten(threads):
    data = toy_graph()
    loader = NeighborLoader(data, [3, 2], batch_size=16, shuffle=True, threads=threads)
    kept = list(loader) + list(loader)  # every batch of two epochs held at once
    for batch in kept:
        assert torch.equal(batch.x, data.x[batch.n_id])
        assert torch.equal(batch.y, data.y[batch.n_id])


def test_a_loader_reuses_the_buffers_of_dropped_batches():
    loader = NeighborLoader(toy_graph(), [3, 2], batch_size=16)
    ptrs = {batch.x.data_ptr() for batch in loader}  # each batch dropped after the next one
    assert len(loader) >= 15 and len(ptrs) <= 4


def test_kept_hetero_batches_are_not_overwritten():
    data = toy_hetero()
    data["author"].x = torch.randn(data["author"].num_nodes, 6)  # same attribute, two types
    loader = NeighborLoader(data, [3, 2], input_nodes="paper", batch_size=16, shuffle=True)
    for batch in list(loader) + list(loader):
        for nt in ("paper", "author"):
            assert torch.equal(batch[nt].x, data[nt].x[batch[nt].n_id])


@pytest.mark.parametrize("threads", [0, 2])
def test_kept_batches_keep_their_sampled_edges(threads):
    """The kernel writes `n_id`, `edge_index` and `e_id` straight into pooled buffers: a batch
    held while later ones are sampled still names real edges of the graph."""
    data = toy_graph()
    loader = NeighborLoader(data, [3, 2], batch_size=16, shuffle=True, threads=threads)
    kept = list(loader) + list(loader)
    for batch in kept:
        src, dst = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
        assert batch.edge_index.is_contiguous() and batch.e_id.numel() == src.numel() > 0
        assert torch.equal(data.edge_index[:, batch.e_id], torch.stack([src, dst]))


def test_the_kernel_writes_into_reused_buffers():
    loader = NeighborLoader(toy_graph(), [3, 2], batch_size=16)
    ptrs = {(b.n_id.data_ptr(), b.edge_index.data_ptr(), b.e_id.data_ptr()) for b in loader}
    assert len(loader) >= 15 and len(ptrs) <= 4
