"""A PyG-style script joins RPC first and builds its loader after (`init_rpc`, then
`DistNeighborLoader(..., num_workers=0)`): a rank whose loader is built sooner asks its peer
for halo rows and hops before the peer has registered its stores. The peer's endpoints wait
for the registration (`endpoints.await_registered`), so both ranks' epochs complete and every
row they receive is the original's."""

from __future__ import annotations

import pickle
import time

import pytest
import torch

from tests.helpers.dist_graphs import node_features, random_graph, write_homo
from tests.helpers.ports import free_port
from tests.helpers.ranks import run_ranks

pytestmark = pytest.mark.dist
N, PARTS, LATE_S = 300, 2, 3.0


def _rank(rank: int, root: str, port: int, queue) -> None:
    """One rank of the script: init_rpc, rank 1 waits LATE_S, a full-neighbour epoch; reports
    the batches and (wall clock) when its loader's construction began and ended."""
    import app.distributed as pyg_dist

    torch.set_num_threads(1)
    ctx = pyg_dist.DistContext(rank=rank, global_rank=rank, world_size=PARTS,
                               global_world_size=PARTS, group_name="late", partition_idx=rank,
                               num_partitions=PARTS, name=f"trainer{rank}-0")  # fmt: skip
    pyg_dist.init_rpc(ctx, "127.0.0.1", port, rpc_timeout=60.0)
    try:
        if rank == 1:
            time.sleep(LATE_S)  # rank 0's loader asks before this rank serves anything
        began = time.time()  # the constructor registers this rank's stores, then fills its cache
        loader = pyg_dist.DistNeighborLoader(
            root, [-1, -1], "127.0.0.1", port, ctx, batch_size=32, num_workers=0
        )
        built = time.time()
        batches = [(b.n_id, b.x) for b in loader]
        queue.put(pickle.dumps((rank, (batches, began, built))))
    except Exception as e:  # the test fails at once with this rank's error
        queue.put(pickle.dumps((rank, f"{type(e).__name__}: {e}")))
        raise
    finally:
        pyg_dist.shutdown_rpc()


def test_a_rank_that_registers_late_is_waited_for(tmp_path):
    x = node_features(N)
    write_homo(tmp_path, random_graph(N, 5, seed=4), x, torch.arange(N) % 7, PARTS)
    port = free_port()
    results = run_ranks(_rank, [(r, str(tmp_path), port) for r in (0, 1)])
    seen = torch.cat([n_id for batches, *_ in results.values() for n_id, _ in batches])
    assert seen.unique().numel() == N  # the two ranks' seeds and neighbours cover the graph
    for batches, *_ in results.values():
        for n_id, feats in batches:
            assert torch.equal(feats, x[n_id])  # halo and remote rows are the originals
    (_, began0, built0), (_, began1, _) = results[0], results[1]
    assert began0 < began1 <= built0  # rank 0 asked first, and its loader waited for rank 1
