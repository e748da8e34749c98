"""DistEmbedding lookup and sparse-update throughput, 2 partitions over real RPC on 127.0.0.1.

Rank 0 looks up batches whose rows are split evenly between its own shard and rank 1's, then
runs SparseAdam steps on them; the same batches on a 1-partition table (all rows local) are the
side-by-side reference, so the ratio isolates the cost of the remote half.
"""

from __future__ import annotations

import socket
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

from bench.common import record

ROWS, DIM, BATCH, STEPS = 1_000_000, 64, 20_000, 30


class RangeBook:
    def __init__(self, num_parts: int) -> None:
        self.num_parts = num_parts

    def partition_of(self, ids: torch.Tensor) -> torch.Tensor:
        return ids * self.num_parts // ROWS


def _measure(emb, opt_cls) -> tuple[float, float]:
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, ROWS, (BATCH,), generator=gen) for _ in range(STEPS)]
    start = time.perf_counter()
    with torch.no_grad():
        for ids in batches:
            emb(ids)
    lookup = STEPS * BATCH / (time.perf_counter() - start)
    opt = opt_cls([emb], lr=0.01)
    start = time.perf_counter()
    for ids in batches:
        emb(ids).sum().backward()
        opt.step()
    update = STEPS * BATCH / (time.perf_counter() - start)
    return lookup, update


def _worker(rank: int, world: int, port: int, out: str) -> None:
    from torch.distributed import rpc

    from app.distributed.embedding import DistEmbedding
    from app.distributed.optim import SparseAdam

    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}", rpc_timeout=60)
    rpc.init_rpc(f"trainer{rank}-0", rank=rank, world_size=world, rpc_backend_options=opts)
    emb = DistEmbedding(ROWS, DIM, "bench", book=RangeBook(world), part_id=rank)
    if rank == 0:
        torch.save(torch.tensor(_measure(emb, SparseAdam)), out)
    rpc.shutdown()


def _run(world: int) -> tuple[float, float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = str(Path(tempfile.mkdtemp()) / "r.pt")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(r, world, port, out)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
        if p.exitcode != 0:
            raise RuntimeError(f"embedding bench worker exited with {p.exitcode}")
    lookup, update = torch.load(out, weights_only=True).tolist()
    return lookup, update


def main() -> None:
    local_lookup, local_update = _run(1)
    dist_lookup, dist_update = _run(2)
    record("embedding", "lookup_rows_per_s_1part", local_lookup, "rows/s")
    record("embedding", "update_rows_per_s_1part", local_update, "rows/s")
    record(
        "embedding",
        "lookup_rows_per_s_2part",
        dist_lookup,
        "rows/s",
        "1-partition lookup",
        dist_lookup / local_lookup,
    )
    record(
        "embedding",
        "update_rows_per_s_2part",
        dist_update,
        "rows/s",
        "1-partition update",
        dist_update / local_update,
    )


if __name__ == "__main__":
    main()
