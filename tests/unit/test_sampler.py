"""The sampling driver (homo + hetero) and the local NeighborSampler (nodes and links)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling, NodeSamplerInput

from app.sampler.csc import to_csc
from app.sampler.neighbor import (
    NeighborSampler,
    local_hop_fn,
    normalize_num_neighbors,
    sample_multi_hop,
    sample_multi_hop_hetero,
)

N = 120


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    ei = torch.from_numpy(rng.integers(0, N, (2, 900)))
    ei = ei[:, ei[0] != ei[1]]
    return Data(edge_index=ei, num_nodes=N, x=torch.randn(N, 3), time=torch.arange(N) % 17)


def edge_set(ei: torch.Tensor) -> set:
    return set(map(tuple, ei.t().tolist()))


def nodes_in(seeds: list[int]) -> NodeSamplerInput:
    return NodeSamplerInput(None, torch.tensor(seeds))


def assert_real_edges(out, data):
    """Every sampled edge exists with the reported edge id, from node[row] to node[col]."""
    glob = torch.stack([out.node[out.row], out.node[out.col]])
    assert torch.equal(data.edge_index[:, out.edge], glob)


# Homogeneous ######################################################################################


def test_fused_sampler_equals_driver(data):
    sampler = NeighborSampler(data, [4, 3], seed=1)
    out = sampler.sample_from_nodes(nodes_in([5, 9, 77]), seed=123)
    colptr, row, perm = to_csc(data.edge_index, N)
    ref = sample_multi_hop([5, 9, 77], [4, 3], local_hop_fn(colptr, row, perm, False, 123), N)
    for key in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(out, key), getattr(ref, key)), key
    assert out.num_sampled_nodes == ref.num_sampled_nodes
    assert out.num_sampled_edges == ref.num_sampled_edges
    assert_real_edges(out, data)
    assert out.metadata == (None, None)


def test_calls_draw_fresh_seeds_but_are_reproducible(data):
    a, b = NeighborSampler(data, [2, 2], seed=3), NeighborSampler(data, [2, 2], seed=3)
    outs_a = [a.sample_from_nodes(nodes_in([1, 2, 3])) for _ in range(3)]
    outs_b = [b.sample_from_nodes(nodes_in([1, 2, 3])) for _ in range(3)]
    assert all(torch.equal(x.edge, y.edge) for x, y in zip(outs_a, outs_b, strict=True))
    assert not all(torch.equal(outs_a[0].edge, o.edge) for o in outs_a[1:])


def test_bidirectional_and_induced(data):
    seeds = nodes_in([0, 1, 2, 3])
    bi = NeighborSampler(data, [3, 2], subgraph_type="bidirectional").sample_from_nodes(seeds)
    pairs = edge_set(torch.stack([bi.row, bi.col]))
    assert all((c, r) in pairs for r, c in pairs)
    ind = NeighborSampler(data, [3, 2], subgraph_type="induced").sample_from_nodes(seeds)
    assert_real_edges(ind, data)
    inside = set(ind.node.tolist())
    want = {
        e for e, (s, d) in enumerate(data.edge_index.t().tolist()) if s in inside and d in inside
    }
    assert set(ind.edge.tolist()) == want and ind.num_sampled_edges is None


def test_temporal_sampler(data):
    sampler = NeighborSampler(data, [5, 5], time_attr="time", temporal_strategy="last")
    seeds = torch.tensor([10, 40, 90])
    out = sampler.sample_from_nodes(NodeSamplerInput(None, seeds, data.time[seeds]))
    assert out.batch is not None
    assert torch.all(data.time[out.node] <= data.time[seeds][out.batch])
    with pytest.raises(ValueError, match="seed time"):
        sampler.sample_from_nodes(nodes_in([1]))


def test_bad_options(data):
    with pytest.raises(ValueError, match="subgraph_type"):
        NeighborSampler(data, [2], subgraph_type="sideways")
    with pytest.raises(ValueError, match="induced"):
        NeighborSampler(data, [2], subgraph_type="induced", disjoint=True)
    with pytest.raises(ValueError, match="node-level"):
        NeighborSampler(
            Data(edge_index=data.edge_index, num_nodes=N, t=torch.zeros(900)), [2], time_attr="t"
        )
    with pytest.raises(ValueError, match="ints >= -1"):
        NeighborSampler(data, [2, -3])
    with pytest.raises(ValueError, match="hop_fn at hop 0"):
        sample_multi_hop([1], [2], lambda f, k, h: (f, f, np.array([5])), N)


# Links ############################################################################################


def links(data, n=12):
    ei = data.edge_index[:, :n]
    return EdgeSamplerInput(None, ei[0], ei[1])


def test_link_binary(data):
    out = NeighborSampler(data, [3]).sample_from_edges(links(data), NegativeSampling("binary", 2))
    _, eli, label, _ = out.metadata
    assert eli.shape == (2, 36) and label.tolist() == [1.0] * 12 + [0.0] * 24
    glob = out.node[eli]
    assert torch.equal(glob[:, :12], data.edge_index[:, :12])  # positives are the real links
    assert_real_edges(out, data)


def test_link_triplet_and_disjoint(data):
    sampler = NeighborSampler(data, [3], disjoint=True)
    out = sampler.sample_from_edges(links(data), NegativeSampling("triplet", 3))
    _, src_i, pos_i, neg_i, _ = out.metadata
    assert src_i.shape == (12,) and pos_i.shape == (12,) and neg_i.shape == (12, 3)
    assert torch.equal(out.node[src_i], data.edge_index[0, :12])
    assert torch.equal(out.node[pos_i], data.edge_index[1, :12])
    assert int(out.batch.max()) < 12  # subgraphs folded onto their positive link


def test_link_without_negatives(data):
    out = NeighborSampler(data, [2]).sample_from_edges(links(data, 5))
    _, eli, label, _ = out.metadata
    assert label is None and torch.equal(out.node[eli], data.edge_index[:, :5])


# Heterogeneous ####################################################################################


@pytest.fixture(scope="module")
def hetero():
    """paper ← cites ← paper, author → writes → paper, topic → tags → paper.

    author and topic have no incoming edges; topic has no features."""
    rng = np.random.default_rng(1)
    d = HeteroData()
    d["paper"].x, d["paper"].y = torch.randn(30, 4), torch.randint(0, 3, (30,))
    d["author"].x = torch.randn(20, 2)
    d["topic"].num_nodes = 6
    d["paper", "cites", "paper"].edge_index = torch.from_numpy(rng.integers(0, 30, (2, 120)))
    d["author", "writes", "paper"].edge_index = torch.stack(
        [torch.from_numpy(rng.integers(0, 20, 90)), torch.from_numpy(rng.integers(0, 30, 90))]
    )
    d["topic", "tags", "paper"].edge_index = torch.stack(
        [torch.from_numpy(rng.integers(0, 6, 60)), torch.from_numpy(rng.integers(0, 30, 60))]
    )
    return d


def hetero_reference(d, seeds, hops):
    """Full fan-out: per type the node order and per edge type the sampled edge-id set."""
    order = {nt: [] for nt in d.node_types}
    order["paper"] = list(seeds)
    edges = {et: set() for et in d.edge_types}
    frontier = {nt: list(v) for nt, v in order.items()}
    for _ in range(hops):
        new = {nt: [] for nt in d.node_types}
        for et in d.edge_types:
            src, _, dst = et
            ei = d[et].edge_index
            for v in frontier[dst]:
                for e in (ei[1] == v).nonzero().view(-1).tolist():
                    edges[et].add(e)
                    u = int(ei[0, e])
                    if u not in order[src] and u not in new[src]:
                        new[src].append(u)
        for nt in d.node_types:
            order[nt] += new[nt]
        frontier = new
    return order, edges


def test_hetero_full_fanout_matches_reference(hetero):
    sampler = NeighborSampler(hetero, [-1, -1])
    out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([0, 5]), None, "paper"))
    order, edges = hetero_reference(hetero, [0, 5], 2)
    for nt in hetero.node_types:
        assert out.node[nt].tolist() == order[nt], nt
        assert sum(out.num_sampled_nodes[nt]) == len(order[nt])
    for et in hetero.edge_types:
        assert set(out.edge[et].tolist()) == edges[et], et
        src, _, dst = et
        glob = torch.stack([out.node[src][out.row[et]], out.node[dst][out.col[et]]])
        assert torch.equal(hetero[et].edge_index[:, out.edge[et]], glob)


def test_hetero_fanout_dict_and_bounds(hetero):
    fan = {
        "paper__cites__paper": [2, 1],
        ("author", "writes", "paper"): [1, 1],
        "topic__tags__paper": [0, 3],
    }
    sampler = NeighborSampler(hetero, fan)
    out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.arange(10), None, "paper"))
    cites = ("paper", "cites", "paper")
    for et, k in ((cites, 2), (("author", "writes", "paper"), 1)):
        first = out.col[et][: out.num_sampled_edges[et][0]]
        assert max(Counter(first.tolist()).values()) <= k
    assert out.num_sampled_edges[("topic", "tags", "paper")][0] == 0
    with pytest.raises(ValueError, match="lacks edge types"):
        normalize_num_neighbors({"paper__cites__paper": [1]}, hetero.edge_types)
    with pytest.raises(ValueError, match="same number of hops"):
        normalize_num_neighbors(
            {et: [1] * (i + 1) for i, et in enumerate(hetero.edge_types)}, hetero.edge_types
        )


def test_hetero_seeds_without_incoming_edges(hetero):
    out = NeighborSampler(hetero, [3, 3]).sample_from_nodes(
        NodeSamplerInput(None, torch.tensor([1, 2]), None, "author")
    )
    assert out.node["author"].tolist() == [1, 2] and out.node["topic"].numel() == 0
    assert all(r.numel() == 0 for r in out.row.values())


def test_hetero_driver_disjoint_and_links(hetero):
    sampler = NeighborSampler(hetero, [2, 2], disjoint=True)
    out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([3, 3]), None, "paper"))
    for et in hetero.edge_types:
        assert torch.equal(out.batch[et[0]][out.row[et]], out.batch[et[2]][out.col[et]])
    et = ("author", "writes", "paper")
    ei = hetero[et].edge_index[:, :6]
    inp = EdgeSamplerInput(None, ei[0], ei[1], input_type=et)
    out = NeighborSampler(hetero, [2]).sample_from_edges(inp, NegativeSampling("binary"))
    _, eli, label, _ = out.metadata
    assert torch.equal(out.node["author"][eli[0, :6]], ei[0])
    assert torch.equal(out.node["paper"][eli[1, :6]], ei[1]) and label[6:].sum() == 0
    seeds = {"paper": np.array([1])}
    with pytest.raises(ValueError, match="not in the graph"):
        sample_multi_hop_hetero({"venue": np.array([1])}, {}, {}, {"paper": 30})
    assert sample_multi_hop_hetero(seeds, {}, {}, {"paper": 30}).node["paper"].tolist() == [1]


def test_hetero_induced_keeps_every_edge_among_sampled_nodes(hetero):
    sampler = NeighborSampler(hetero, [2, 2], subgraph_type="induced")
    out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([0, 7]), None, "paper"))
    for et in hetero.edge_types:
        src, _, dst = et
        ei = hetero[et].edge_index
        keep = torch.isin(ei[0], out.node[src]) & torch.isin(ei[1], out.node[dst])
        assert set(out.edge[et].tolist()) == set(keep.nonzero().view(-1).tolist())
        glob = torch.stack([out.node[src][out.row[et]], out.node[dst][out.col[et]]])
        assert torch.equal(ei[:, out.edge[et]], glob)


def test_threads_share_one_sampler(data, hetero):
    """Kernels release the GIL and keep scratch per thread: concurrent calls equal serial ones."""
    from concurrent.futures import ThreadPoolExecutor

    for graph, ntype in ((data, None), (hetero, "paper")):
        sampler = NeighborSampler(graph, [3, 3])
        inputs = [NodeSamplerInput(None, torch.arange(i, i + 8), None, ntype) for i in range(8)]

        def run(i, sampler=sampler, inputs=inputs):
            return sampler.sample_from_nodes(inputs[i], seed=i)

        serial = [run(i) for i in range(8)]
        with ThreadPoolExecutor(2) as pool:
            parallel = list(pool.map(run, range(8)))
        for a, b in zip(serial, parallel, strict=True):
            ea = a.edge if ntype is None else torch.cat(list(a.edge.values()))
            eb = b.edge if ntype is None else torch.cat(list(b.edge.values()))
            assert torch.equal(ea, eb)
