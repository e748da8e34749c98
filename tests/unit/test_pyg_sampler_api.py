"""PyG's `DistNeighborSampler` entry points on this package (issue 29), driven as PyG's own
tests drive them: two processes, PyG's constructor `(current_ctx, data, num_neighbors, ...)`,
`init_rpc`, `init_sampler_instance()`, `register_sampler_rpc()`, a `ConcurrentEventLoop` running
`node_sample` / `edge_sample` / `sample_one_hop`. Each rank holds half of PyG's 10-node test
graph (the same stores PyG's test builds with `from_data`); the distributed samples must equal
our single-machine `NeighborSampler` on the whole graph, id for id, and the edge-level temporal
sample must equal the one worked out by hand below."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.sampler import EdgeSamplerInput, NodeSamplerInput
from torch_geometric.sampler.neighbor_sampler import edge_sample, node_sample

import app.distributed as pyg_dist
from app.distributed.dist_neighbor_sampler import DistNeighborSampler
from app.distributed.event_loop import ConcurrentEventLoop
from app.sampler.neighbor import NeighborSampler
from tests.helpers.ports import free_port
from tests.helpers.ranks import run_ranks

GLOBAL_EDGES = torch.tensor([[1, 2, 3, 4, 5, 0, 5, 6, 7, 8, 9, 0],
                             [0, 1, 2, 3, 4, 4, 9, 5, 6, 7, 8, 9]])  # fmt: skip
NODE_TIME = torch.tensor([5, 0, 1, 3, 3, 4, 4, 4, 4, 4])
SEEDS = {0: torch.tensor([1, 6]), 1: torch.tensor([4, 9])}
LINKS = {0: (torch.tensor([1, 6]), torch.tensor([2, 7])), 1: (torch.tensor([4, 9]), torch.tensor([5, 0]))}  # fmt: skip


def _stores(rank: int):
    """PyG's test partition of rank `rank` (`from_data` stores, times in the feature store)."""
    if rank == 0:
        node_id = torch.tensor([0, 1, 2, 3, 4, 5, 9])
        edges = torch.tensor([[1, 2, 3, 4, 5, 0, 0], [0, 1, 2, 3, 4, 4, 9]])
        edge_time = torch.tensor([0, 1, 2, 3, 4, 5, 11])
    else:
        node_id = torch.tensor([0, 4, 5, 6, 7, 8, 9])
        edges = torch.tensor([[5, 6, 7, 8, 9, 5, 0], [4, 5, 6, 7, 8, 9, 9]])
        edge_time = torch.tensor([4, 7, 7, 7, 7, 7, 11])
    fs = pyg_dist.LocalFeatureStore.from_data(node_id)
    gs = pyg_dist.LocalGraphStore.from_data(None, edges, num_nodes=10, is_sorted=True)
    gs.node_pb = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    gs.meta.update({"num_parts": 2})
    gs.partition_idx, gs.num_partitions = rank, 2
    fs.put_tensor(NODE_TIME, group_name=None, attr_name="time")
    fs.put_tensor(edge_time, group_name=None, attr_name="edge_time")
    return fs, gs


def _as_tuple(out) -> dict:
    return {k: getattr(out, k) for k in ("node", "row", "col", "batch", "num_sampled_nodes",
                                          "num_sampled_edges")}  # fmt: skip


def _rank(rank: int, port: int, queue) -> None:
    """One process of the run: every entry point once, results to `queue`."""
    ctx = pyg_dist.DistContext(rank=rank, global_rank=rank, world_size=2, global_world_size=2,
                               group_name="pyg-sampler-api")  # fmt: skip
    data = _stores(rank)
    samplers = {
        "plain": DistNeighborSampler(ctx, data, [-1, -1]),
        "disjoint": DistNeighborSampler(ctx, data, [-1, -1], disjoint=True),
        "node_time": DistNeighborSampler(ctx, data, [-1, -1], disjoint=True, time_attr="time"),
        "edge_time": DistNeighborSampler(
            ctx, data, [1, 1], disjoint=True, time_attr="edge_time", temporal_strategy="last"
        ),  # fmt: skip
    }
    pyg_dist.init_rpc(ctx, "127.0.0.1", port)
    got = {}
    try:
        for name, sampler in samplers.items():
            sampler.init_sampler_instance()
            sampler.register_sampler_rpc()
            sampler.event_loop = ConcurrentEventLoop(2)
            sampler.event_loop.start_loop()
            time = torch.tensor([3, 7]) if name == "edge_time" else None
            inputs = NodeSamplerInput(input_id=None, node=SEEDS[rank], time=time)
            got[name] = _as_tuple(sampler.event_loop.run_task(sampler.node_sample(inputs)))
        plain = samplers["plain"]
        row, col = LINKS[rank]
        link = EdgeSamplerInput(input_id=None, row=row, col=col)
        out = plain.event_loop.run_task(plain.edge_sample(link, plain.node_sample, 10, False))
        got["link"] = (_as_tuple(out), out.metadata[1])
        one_hop = plain.sample_one_hop(SEEDS[rank], -1, src_batch=torch.tensor([0, 1]))
        hop = plain.event_loop.run_task(one_hop)
        got["one_hop"] = (hop.node, hop.edge, hop.metadata[0], hop.batch)
        for sampler in samplers.values():
            sampler.event_loop.close()
        queue.put(pickle.dumps((rank, got)))  # bytes: tensors outlive this process
    finally:
        pyg_dist.shutdown_rpc()


def _local(rank: int, **kwargs) -> dict:
    data = Data(edge_index=GLOBAL_EDGES, num_nodes=10, time=NODE_TIME)
    sampler = NeighborSampler(data, [-1, -1], **kwargs)
    inputs = NodeSamplerInput(input_id=None, node=SEEDS[rank])

    def sample_fn(seed, seed_time):
        if kwargs.get("time_attr") and seed_time is None:
            seed_time = NODE_TIME[seed]  # PyG's rule: each seed's own time
        return sampler.sample(seed, seed_time, seed=0)

    return _as_tuple(node_sample(inputs, sample_fn)), sample_fn


def _assert_same(got: dict, want: dict, what: str) -> None:
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(got[key], value), f"{what}: {key} {got[key]} != {value}"
        else:
            assert got[key] == value, f"{what}: {key} {got[key]} != {value}"


# The edge-level sample by hand: a seed keeps an in-edge only if the edge is not later than its
# time ('last': the latest one). Rank 0, seeds 1 (t=3), 6 (t=7): 2->1 (t1), 3->2 (t2); 7->6 (t7),
# 8->7 (t7). Rank 1, seeds 4 (t=3), 9 (t=7): 4 has none (t4, t5); 5->9 (t7), 6->5 (t7).
EDGE_LEVEL = {
    0: dict(node=torch.tensor([1, 6, 2, 7, 3, 8]), batch=torch.tensor([0, 1, 0, 1, 0, 1]),
            row=torch.tensor([2, 3, 4, 5]), col=torch.tensor([0, 1, 2, 3]),
            num_sampled_nodes=[2, 2, 2], num_sampled_edges=[2, 2]),
    1: dict(node=torch.tensor([4, 9, 5, 6]), batch=torch.tensor([0, 1, 1, 1]),
            row=torch.tensor([2, 3]), col=torch.tensor([1, 2]),
            num_sampled_nodes=[2, 1, 1], num_sampled_edges=[1, 1]),
}  # fmt: skip


@pytest.mark.dist
def test_pyg_sampler_entry_points_equal_the_local_sampler():
    port = free_port()
    results = run_ranks(_rank, [(r, port) for r in (0, 1)])
    for rank, got in results.items():
        want, _ = _local(rank)
        _assert_same(got["plain"], {k: v for k, v in want.items() if k != "batch"}, "plain")
        _assert_same(got["disjoint"], _local(rank, disjoint=True)[0], "disjoint")
        _assert_same(got["node_time"], _local(rank, disjoint=True, time_attr="time")[0], "time")
        _assert_same(got["edge_time"], EDGE_LEVEL[rank], "edge_time")
        row, col = LINKS[rank]
        link = EdgeSamplerInput(input_id=None, row=row, col=col)
        out = edge_sample(link, _local(rank)[1], 10, False)
        _assert_same(got["link"][0], {k: v for k, v in _as_tuple(out).items() if k != "batch"},
                     "link")  # fmt: skip
        assert torch.equal(got["link"][1], out.metadata[1]), "edge_label_index"
        nbrs, eids, counts, batch = got["one_hop"]
        assert batch.tolist() == [0] * counts[0] + [1] * counts[1]
        for i, v in enumerate(SEEDS[rank].tolist()):
            into = GLOBAL_EDGES[1] == v
            start = sum(counts[:i])
            taken = nbrs[start : start + counts[i]]
            assert sorted(taken.tolist()) == sorted(GLOBAL_EDGES[0][into].tolist())
        assert eids.numel() == sum(counts)


def test_constructor_refuses_our_order():
    """PyG's order is (current_ctx, data, ...): stores in the context's place are refused in one
    line (our internal sampler's order is (data, num_neighbors, ...))."""
    data = _stores(0)
    with pytest.raises(TypeError, match="pass a DistContext first"):
        DistNeighborSampler(data, data, [-1])


def test_edge_time_rows_must_match_the_edges():
    fs, gs = _stores(0)
    fs.put_tensor(torch.tensor([1, 2]), group_name=None, attr_name="edge_time")
    ctx = pyg_dist.DistContext(rank=0, global_rank=0, world_size=2, global_world_size=2,
                               group_name="g")  # fmt: skip
    with pytest.raises(ValueError, match="2 rows for 7 local edges"):
        DistNeighborSampler(ctx, (fs, gs), [1], time_attr="edge_time")
