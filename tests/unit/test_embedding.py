"""DistEmbedding + sparse optimizers in one process: row-touch and torch-reference equality."""

from __future__ import annotations

import subprocess

import pytest
import torch

from app.distributed.embedding import DistEmbedding
from app.distributed.optim import SparseAdagrad, SparseAdam
from app.distributed.tensor import DistTensor, unregister
from tests.helpers.jobs import PYTHON, REPO


class OnePart:
    num_parts = 1

    def partition_of(self, ids):
        return torch.zeros_like(ids)


@pytest.fixture
def names():
    made = []
    yield made
    for n in made:
        unregister(n)


def make(names, name, n=50, dim=4):
    names.append(name)
    gen = torch.Generator().manual_seed(0)
    init = lambda shape, dtype: torch.randn(shape, generator=gen, dtype=dtype)  # noqa: E731
    return DistEmbedding(n, dim, name, init, book=OnePart(), part_id=0)


def batches():
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        ids = torch.randint(0, 50, (12,), generator=gen)  # duplicates on purpose
        yield ids, torch.randn(12, 4, generator=gen)


@pytest.mark.parametrize(
    "ours, theirs",
    [
        (lambda p: SparseAdagrad(p, lr=0.1), lambda p: torch.optim.Adagrad(p, lr=0.1, eps=1e-10)),
        (lambda p: SparseAdam(p, lr=0.05), lambda p: torch.optim.SparseAdam(p, lr=0.05)),
    ],
    ids=["adagrad", "adam"],
)
def test_matches_torch_sparse_optimizer(names, ours, theirs):
    emb = make(names, f"emb-{len(names)}")
    dense = torch.nn.Embedding(50, 4, sparse=True)
    with torch.no_grad():
        dense.weight.copy_(emb.weight[torch.arange(50)])
    opt, ref = ours([emb]), theirs(dense.parameters())
    for ids, w in batches():
        (emb(ids) * w).sum().backward()
        opt.step()
        ref.zero_grad()
        (dense(ids) * w).sum().backward()
        with torch.sparse.check_sparse_tensor_invariants(enable=False):  # as LocalTables.step
            ref.step()
    torch.testing.assert_close(emb.weight[torch.arange(50)], dense.weight.detach())


def test_step_touches_only_batch_rows(names):
    emb = make(names, "touch")
    before = emb.weight[torch.arange(50)]
    ids = torch.tensor([3, 7, 7, 42])
    emb(ids).pow(2).sum().backward()
    SparseAdam([emb], lr=0.1).step()
    after = emb.weight[torch.arange(50)]
    changed = torch.nonzero((after != before).any(dim=1)).flatten()
    assert changed.tolist() == [3, 7, 42]
    assert emb.trace == []


def test_no_grad_lookups_are_not_traced(names):
    emb = make(names, "eval")
    with torch.no_grad():
        emb(torch.tensor([1, 2]))
    assert emb.trace == []


def test_dist_tensor_read_write_and_errors(names):
    names.append("t")
    t = DistTensor((10, 2), torch.float32, "t", book=OnePart(), part_id=0)
    t[torch.tensor([1, 5])] = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert t[torch.tensor([5, 1, 0])].tolist() == [[3.0, 4.0], [1.0, 2.0], [0.0, 0.0]]
    with pytest.raises(ValueError, match="already used"):
        DistTensor((10, 2), torch.float32, "t", book=OnePart(), part_id=0)
    with pytest.raises(ValueError, match="lr=0"):
        SparseAdam([], lr=0)


def test_dist_tensor_reads_large_requests_in_pieces(names, monkeypatch):
    """A read larger than READ_PIECE_BYTES goes in pieces, each answer copied to its rows."""
    import app.distributed.tensor as dist_tensor

    names.append("pieces")
    rows = torch.arange(40, dtype=torch.float32).view(20, 2)
    t = DistTensor((20, 2), torch.float32, "pieces", book=OnePart(), part_id=0,
                   init_func=lambda shape, dtype: rows.clone())  # fmt: skip
    calls = []
    route = dist_tensor.route
    monkeypatch.setattr(dist_tensor, "route", lambda *a: calls.append(1) or route(*a))
    monkeypatch.setattr(dist_tensor, "READ_PIECE_BYTES", 3 * 8)  # 3 rows of 2 floats a piece
    ids = torch.tensor([19, 0, 7, 7, 3, 12, 5, 1])
    out = torch.full((10, 2), -1.0)
    assert t.read(ids, out=out[2:]) is not None
    assert torch.equal(out[2:], rows[ids]) and bool((out[:2] == -1).all())
    assert len(calls) == 3  # 8 ids, 3 a piece


@pytest.mark.dist
def test_local_adagrad_step_warns_nothing():
    """torch's Adagrad on sparse gradients warns once per process ("Sparse invariant checks
    are implicitly disabled") unless the caller opts out, as `LocalTables.step` does; a fresh
    interpreter (the warning and the opt-out are per process) turns a UserWarning into an error."""
    code = (
        "import torch\n"
        "from app.task.tables import LocalTables\n"
        "t = LocalTables({'author': 10}, 4, 'adagrad', 0.1, 'cpu')\n"
        "before = t.rows_state()['author'].clone()\n"
        "t.lookup('author', torch.tensor([1, 2, 2])).sum().backward()\n"
        "t.step()\n"
        "assert not torch.equal(before, t.rows_state()['author'])\n"
    )
    proc = subprocess.run(
        [PYTHON, "-W", "error::UserWarning", "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
