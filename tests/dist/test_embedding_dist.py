"""DistEmbedding over real RPC: 2 processes, rows split across them, updates pushed to owners."""

from __future__ import annotations

import os

import pytest
import torch
import torch.multiprocessing as mp

from tests.helpers.ports import free_port

pytestmark = pytest.mark.dist

N, DIM, STEPS = 40, 3, 4


class HalfBook:
    """Rows < N/2 on partition 0, the rest on partition 1 (a range book)."""

    num_parts = 2

    def partition_of(self, ids):
        return (ids >= N // 2).long()


def _batches():
    gen = torch.Generator().manual_seed(7)
    return [
        (torch.randint(0, N, (10,), generator=gen), torch.randn(10, DIM, generator=gen))
        for _ in range(STEPS)
    ]


def _worker(rank: int, port: int, out: str, kind: str) -> None:
    from torch.distributed import rpc

    from app.distributed.embedding import DistEmbedding
    from app.distributed.optim import SparseAdagrad, SparseAdam

    opts = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}", rpc_timeout=20)
    rpc.init_rpc(f"trainer{rank}-0", rank=rank, world_size=2, rpc_backend_options=opts)
    gen = torch.Generator().manual_seed(100 + rank)
    init = lambda shape, dtype: torch.randn(shape, generator=gen, dtype=dtype)  # noqa: E731
    emb = DistEmbedding(N, DIM, "node_emb", init, book=HalfBook(), part_id=rank)
    if rank == 0:  # rank 0 drives; rank 1 only owns (and serves) its half
        start = emb.weight[torch.arange(N)]
        opt = SparseAdam([emb], lr=0.05) if kind == "adam" else SparseAdagrad([emb], lr=0.1)
        for ids, w in _batches():
            (emb(ids) * w).sum().backward()
            opt.step()
        torch.save({"start": start, "end": emb.weight[torch.arange(N)]}, out)
    rpc.shutdown()


# make test: one optimizer (the sharded state's path is the same); Adam in make test-long
@pytest.mark.parametrize("kind", [pytest.param("adam", marks=pytest.mark.long), "adagrad"])
def test_sharded_updates_equal_dense_reference(tmp_path, kind):
    out = str(tmp_path / "result.pt")
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, port, out, kind)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout=90)
        assert [p.exitcode for p in procs] == [0, 0]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    res = torch.load(out, weights_only=True)
    dense = torch.nn.Embedding(N, DIM, sparse=True)
    with torch.no_grad():
        dense.weight.copy_(res["start"])
    ref = (
        torch.optim.SparseAdam(dense.parameters(), lr=0.05)
        if kind == "adam"
        else torch.optim.Adagrad(dense.parameters(), lr=0.1, eps=1e-10)
    )
    touched = set()
    for ids, w in _batches():
        ref.zero_grad()
        (dense(ids) * w).sum().backward()
        with torch.sparse.check_sparse_tensor_invariants(enable=False):  # as LocalTables.step
            ref.step()
        touched |= set(ids.tolist())
    torch.testing.assert_close(res["end"], dense.weight.detach())
    untouched = sorted(set(range(N)) - touched)
    assert torch.equal(res["end"][untouched], res["start"][untouched])
    assert os.path.getsize(out) > 0
