"""The device seam (`app.model.ops`): every kernel's torch path equals its numba twin on the
CPU (`DISTGNN_KERNELS=torch` forces the path a GPU takes), and so do whole models, forward and
backward, and layer-wise logits. CUDA itself is exercised by tests/gpu (`make test-gpu`)."""

from __future__ import annotations

import pytest
import torch

from app.config import ConfigError
from app.inference import layerwise_logits, local_view
from app.model import ops
from app.model.gnn import Block, SplitRows
from tests.helpers.model_cases import (
    LAYERWISE_KINDS,
    hetero_case,
    layerwise_case,
    model_of,
    sampled_batch,
)

TOL = dict(atol=1e-5, rtol=1e-5)


def both(monkeypatch, fn):
    """`fn()` under the numba kernels, then under the torch ones (on the CPU)."""
    out = []
    for mode in ("numba", "torch"):
        monkeypatch.setenv(ops.KERNELS_ENV, mode)
        out.append(fn())
    return out


def csr(n_rows: int, n_src: int, index: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 30, (n_rows,), generator=gen)
    counts[::7] = 0  # rows without entries
    crow = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)]).to(index)
    col = torch.randint(0, n_src, (int(counts.sum()),), generator=gen).to(index)
    return crow, col


@pytest.mark.parametrize("index", [torch.int64, torch.int32])
def test_spmm_and_mean_equal(monkeypatch, index):
    crow, col = csr(40, 90, index)
    gen = torch.Generator().manual_seed(1)
    h, val = torch.randn(90, 13, generator=gen), torch.rand(col.numel(), generator=gen)
    a, b = both(monkeypatch, lambda: ops.spmm(crow, col, val, h, 40))
    torch.testing.assert_close(a, b, **TOL)
    for head, tail in ((h, h[:0]), (h[:50], h[50:])):

        def mean(head=head, tail=tail):
            return ops.csr_mean(crow, col, head, tail, torch.full((40, 13), 7.0))

        a, b = both(monkeypatch, mean)
        torch.testing.assert_close(a, b, **TOL)
        assert torch.equal(a[::7], torch.zeros_like(a[::7]))


def test_group_by_equal(monkeypatch):
    keys = torch.randint(0, 50, (3000,), generator=torch.Generator().manual_seed(2))
    (pa, ca), (pb, cb) = both(monkeypatch, lambda: ops.group_by(keys, 60))
    assert torch.equal(pa, pb) and torch.equal(ca, cb)  # both stable: the same permutation
    assert torch.equal(keys[pa], keys.sort(stable=True).values)
    perm, ptr = ops.group_by(keys.sort().values, 60)
    assert perm is None and torch.equal(ptr, ca)


def test_group_ptr_and_sort_groups_equal(monkeypatch):
    """The torch path counts groups with a scatter-add (no read-back on a GPU), numba's with
    bincount; `sort_groups` always permutes, even keys already sorted."""
    keys = torch.randint(0, 50, (3000,), generator=torch.Generator().manual_seed(3))
    a, b = both(monkeypatch, lambda: ops.group_ptr(keys, 60))
    assert torch.equal(a, b) and torch.equal(a.diff(), torch.bincount(keys, minlength=60))
    ordered = keys.sort().values
    (pa, ca), (pb, cb) = both(monkeypatch, lambda: ops.sort_groups(ordered, 60))
    assert torch.equal(pa, torch.arange(3000)) and torch.equal(pb, pa)
    assert torch.equal(ca, a) and torch.equal(cb, a)


def test_in_csr_equals_group_by_order(monkeypatch):
    """The in-edge CSR written in one pass: `group_by`'s stable order, int32 sources, on both
    kernels; an edge with an endpoint out of range is one error naming it."""
    gen = torch.Generator().manual_seed(5)
    edges = torch.stack([torch.randint(0, 70, (4000,), generator=gen),
                         torch.randint(0, 50, (4000,), generator=gen)])  # fmt: skip
    perm, ptr = ops.group_by(edges[1], 60)
    (ca, sa), (cb, sb) = both(monkeypatch, lambda: ops.in_csr(edges, 70, 60))
    assert sa.dtype == sb.dtype == torch.int32
    assert torch.equal(ca, ptr) and torch.equal(cb, ptr)
    assert torch.equal(sa.long(), edges[0][perm]) and torch.equal(sa, sb)
    for mode in ("numba", "torch"):
        monkeypatch.setenv(ops.KERNELS_ENV, mode)
        for wrong, message in (([[1, 70], [2, 3]], r"edge 1 \(70 -> 3\)"),
                               ([[1, 3], [2, -1]], r"edge 1 \(3 -> -1\)")):  # fmt: skip
            with pytest.raises(IndexError, match=message):
                ops.in_csr(torch.tensor(wrong), 70, 60)


def test_argmax_and_marking_equal(monkeypatch):
    torch.manual_seed(0)
    wide = torch.randint(-3, 3, (500, 8)).float()  # many ties: the first maximum wins
    wide[3, 2] = wide[7, 0] = wide[7, 5] = wide[9, 6] = float("nan")  # a NaN wins, the first
    rows = wide[:, :7]  # strided, as the last layer's padded projections
    a, b = both(monkeypatch, lambda: ops.row_argmax(rows))
    assert torch.equal(a, rows.argmax(dim=-1)) and torch.equal(a, b)
    for dtype in (torch.int32, torch.int64):
        ids = torch.randint(0, 1000, (5000,), dtype=dtype)
        want = torch.zeros(1000, dtype=torch.bool)
        want[ids.long()] = True

        def marked(ids=ids):
            flags = torch.zeros(1000, dtype=torch.bool)
            ops.mark_ids(ids, flags)
            return flags

        a, b = both(monkeypatch, marked)
        assert torch.equal(a, want) and torch.equal(b, want)
    for mode in ("numba", "torch"):
        monkeypatch.setenv(ops.KERNELS_ENV, mode)
        with pytest.raises(IndexError, match="node id 1000 out of range"):
            ops.mark_ids(torch.tensor([3, 1000]), torch.zeros(1000, dtype=torch.bool))


@pytest.mark.parametrize("mode", ["numba", "torch"])
def test_dropout_is_unbiased_and_seeded(monkeypatch, mode):
    monkeypatch.setenv(ops.KERNELS_ENV, mode)
    x = torch.ones(200_000)
    torch.manual_seed(3)
    a = ops.dropout(x, 0.5, True)
    torch.manual_seed(3)
    assert torch.equal(a, ops.dropout(x, 0.5, True))
    assert abs(float((a == 0).float().mean()) - 0.5) < 0.01
    assert abs(float(a.mean()) - 1.0) < 0.02
    assert ops.dropout(x, 0.5, False) is x
    assert not ops.dropout(x, 1.0, True).any()


def test_bad_kernel_choice_is_one_line_before_any_process(monkeypatch, compose):
    monkeypatch.setenv(ops.KERNELS_ENV, "cuda")
    with pytest.raises(ConfigError, match="DISTGNN_KERNELS='cuda': expected numba, torch"):
        compose("+experiment=smoke")
    with pytest.raises(ConfigError, match="DISTGNN_KERNELS='cuda'"):
        ops.uses_numba(torch.zeros(1))
    monkeypatch.setenv(ops.KERNELS_ENV, "numba")
    with pytest.raises(ConfigError, match="DISTGNN_KERNELS=numba runs CPU kernels only"):
        compose("+experiment=smoke", "train.device=cuda")


def forward_backward(model, run):
    """(output, every parameter's gradient) of `run(model)` summed and differentiated."""
    model.zero_grad()
    out = run(model)
    (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
    return [out.detach()] + [p.grad.clone() for p in model.parameters() if p.grad is not None]


def assert_same(pair):
    a, b = pair
    assert len(a) == len(b) > 1
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, **TOL)


@pytest.mark.parametrize("name", ["sage", "gcn", "gat", "mlp"])
@pytest.mark.parametrize("hidden", [4, 32])  # narrower than the input (project first), wider
def test_models_forward_backward_equal(monkeypatch, name, hidden):
    batch = sampled_batch()
    torch.manual_seed(0)
    model = model_of(name, batch.x.size(1), hidden).train()
    counts = (batch.num_sampled_nodes, batch.num_sampled_edges)
    assert_same(both(monkeypatch, lambda: forward_backward(
        model, lambda m: m(batch.x, batch.edge_index, *counts)[: batch.batch_size])))  # fmt: skip
    assert_same(both(monkeypatch, lambda: forward_backward(
        model, lambda m: m(batch.x, batch.edge_index))))  # fmt: skip


def test_hetero_sage_forward_backward_equal(monkeypatch):
    data, model, x = hetero_case()
    assert_same(both(monkeypatch, lambda: forward_backward(
        model.train(), lambda m: m(x, data.edge_index_dict)["paper"])))  # fmt: skip


def test_block_reads_split_rows_on_both_paths(monkeypatch):
    crow, col = csr(6, 50, torch.int32, seed=3)
    h = torch.randn(50, 7, generator=torch.Generator().manual_seed(5))
    block = Block(crow, col, 50, dst=torch.arange(6))
    a, b = both(monkeypatch, lambda: block.mean(SplitRows(h[:20], h[20:])))
    torch.testing.assert_close(a, b, **TOL)
    torch.testing.assert_close(a, block.mean(h), **TOL)


@pytest.mark.parametrize("kind", LAYERWISE_KINDS)
def test_layerwise_logits_equal(monkeypatch, kind):
    data, model = layerwise_case(kind)
    view = local_view(data)
    a, b = both(monkeypatch, lambda: layerwise_logits(model, view, 37))
    torch.testing.assert_close(a, b, **TOL)
