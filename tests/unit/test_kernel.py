"""The numba kernels: CSC layout, one hop, relabelling, and the fused multi-hop sampler."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from app.sampler.csc import to_csc
from app.sampler.kernel import Relabeler, hop_seed, neighbor_sample, sample_hop
from app.sampler.neighbor import local_hop_fn, sample_multi_hop

N, E = 200, 2_000


@pytest.fixture(scope="module")
def graph():
    rng = np.random.default_rng(0)
    # skewed destinations: a few high in-degree nodes, many low, some with none
    dst = (rng.pareto(1.5, E) * 10).astype(np.int64) % N
    src = rng.integers(0, N, E)
    ei = np.stack([src, dst])
    colptr, row, perm = to_csc(ei, N)
    return ei, colptr, row, perm


def in_edges(ei, v):
    """Edge ids pointing into v, in original order."""
    return np.flatnonzero(ei[1] == v)


# CSC ##############################################################################################


def test_csc_columns_hold_in_neighbours_in_edge_order(graph):
    ei, colptr, row, perm = graph
    assert colptr[0] == 0 and colptr[-1] == E and np.all(np.diff(colptr) >= 0)
    for v in range(N):
        ids = in_edges(ei, v)
        assert perm[colptr[v] : colptr[v + 1]].tolist() == ids.tolist()
        assert row[colptr[v] : colptr[v + 1]].tolist() == ei[0, ids].tolist()


def test_csc_rejects_bad_input():
    with pytest.raises(ValueError, match=r"shape \[2, E\]"):
        to_csc(np.zeros((3, 4), np.int64), 5)
    with pytest.raises(ValueError, match="num_nodes is 3"):
        to_csc(np.array([[0, 1], [2, 3]]), 3)
    colptr, row, perm = to_csc(np.empty((2, 0), np.int64), 4)
    assert colptr.tolist() == [0] * 5 and row.size == 0 and perm.size == 0


# One hop ##########################################################################################


def test_sample_hop_without_replacement(graph):
    ei, colptr, row, perm = graph
    frontier = np.arange(N)
    for k in (1, 3, 40):  # 40 > 32 exercises the Fisher-Yates path
        nbrs, epos, counts = sample_hop(colptr, row, frontier, k, seed=5)
        assert counts.sum() == nbrs.size == epos.size
        off = np.concatenate([[0], np.cumsum(counts)])
        for v in frontier:
            got = epos[off[v] : off[v + 1]]
            deg = colptr[v + 1] - colptr[v]
            assert counts[v] == min(deg, k)
            assert len(set(got.tolist())) == len(got)  # no duplicates
            assert np.all((got >= colptr[v]) & (got < colptr[v + 1]))  # real in-edges of v
            assert np.all(ei[:, perm[got]] == np.stack([nbrs[off[v] : off[v + 1]], [v] * len(got)]))
            if deg <= k:
                assert sorted(got.tolist()) == list(range(colptr[v], colptr[v + 1]))


def test_sample_hop_full_replace_and_empty(graph):
    ei, colptr, row, _ = graph
    deg = np.diff(colptr)
    frontier = np.arange(N)
    _, epos, counts = sample_hop(colptr, row, frontier, -1)
    assert counts.tolist() == deg.tolist() and epos.tolist() == list(range(E))
    _, epos, counts = sample_hop(colptr, row, frontier, 7, replace=True, seed=1)
    assert counts.tolist() == np.where(deg > 0, 7, 0).tolist()
    isolated = np.flatnonzero(deg == 0)[:3]
    assert sample_hop(colptr, row, isolated, 5)[2].tolist() == [0] * len(isolated)
    with pytest.raises(ValueError, match="frontier holds node ids"):
        sample_hop(colptr, row, np.array([N]), 2)


def test_sample_hop_is_uniform():
    """One of 4 neighbours, many seeds: each is picked about a quarter of the time."""
    colptr, row, _ = to_csc(np.array([[1, 2, 3, 4], [0, 0, 0, 0]]), 5)
    picks = Counter(int(sample_hop(colptr, row, [0], 1, seed=s)[0][0]) for s in range(4000))
    assert set(picks) == {1, 2, 3, 4}
    assert all(850 < c < 1150 for c in picks.values()), picks


def test_sample_hop_temporal(graph):
    ei, colptr, row, _ = graph
    rng = np.random.default_rng(1)
    node_time = rng.integers(0, 100, N)
    frontier = rng.integers(0, N, 50)
    seed_time = rng.integers(0, 100, 50)
    for strategy in ("uniform", "last"):
        nbrs, _, counts = sample_hop(
            colptr, row, frontier, 3, False, 2, node_time, seed_time, strategy
        )
        owner = np.repeat(np.arange(50), counts)
        assert np.all(node_time[nbrs] <= seed_time[owner])
        for i, v in enumerate(frontier):
            ok = node_time[row[colptr[v] : colptr[v + 1]]] <= seed_time[i]
            assert counts[i] == min(3, ok.sum())
    # "last" takes the most recent qualifying neighbours
    nbrs, _, counts = sample_hop(colptr, row, frontier, 2, False, 0, node_time, seed_time, "last")
    off = np.concatenate([[0], np.cumsum(counts)])
    for i, v in enumerate(frontier):
        cand = np.sort([t for t in node_time[row[colptr[v] : colptr[v + 1]]] if t <= seed_time[i]])
        assert sorted(node_time[nbrs[off[i] : off[i + 1]]].tolist()) == cand[-2:].tolist()
    with pytest.raises(ValueError, match="seed_time"):
        sample_hop(colptr, row, frontier, 2, node_time=node_time)


# Relabeler ########################################################################################


def test_relabeler_first_appearance_order_and_reset():
    rel = Relabeler(10)
    assert rel.fill([4, 2, 4]).tolist() == [0, 1, 2]  # duplicate seed keeps its own slot
    assert rel.add([7, 2, 4, 7, 9]).tolist() == [3, 1, 0, 3, 4]
    assert rel.nodes.tolist() == [4, 2, 4, 7, 9]
    rel.reset()
    assert len(rel) == 0 and rel.add([9, 4]).tolist() == [0, 1]
    big = np.arange(10).repeat(300)  # grows the buffers past their first size
    rel.reset()
    assert rel.add(big).tolist() == big.tolist()
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        rel.add([10])


def test_relabeler_disjoint_keys_by_batch():
    rel = Relabeler(5000, disjoint=True)
    rel.fill([3, 3])
    assert rel.add([1, 1, 3], [0, 1, 0]).tolist() == [2, 3, 0]
    assert rel.batch.tolist() == [0, 1, 0, 1]
    many = np.arange(3000)
    assert rel.add(many, np.zeros(3000, np.int64))[:5].tolist() == [4, 2, 5, 0, 6]
    rel.reset()
    assert rel.add([3], [1]).tolist() == [0]
    with pytest.raises(ValueError, match="needs `batch`"):
        rel.add([1])


@pytest.mark.parametrize("disjoint", [False, True])
def test_add_hop_equals_add_beside_repeated_columns(disjoint):
    """One pass relabels a hop's neighbours and writes its columns: the same ids as `add` of
    the neighbours (trees repeated per neighbour) and `np.repeat` of the frontier's local ids."""
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 6, 400)
    nbrs, dst_local = rng.integers(0, 900, counts.sum()), rng.permutation(400) + 7
    trees = rng.integers(0, 30, 400)
    ref, rel = Relabeler(900, disjoint), Relabeler(900, disjoint)
    for r in (ref, rel):
        r.fill(np.arange(7))
    want = ref.add(nbrs, np.repeat(trees, counts) if disjoint else None)
    rows, cols = rel.add_hop(nbrs, counts, dst_local, trees)
    assert rows.tolist() == want.tolist() and rel.nodes.tolist() == ref.nodes.tolist()
    assert cols.tolist() == np.repeat(dst_local, counts).tolist()
    if disjoint:
        assert rel.batch.tolist() == ref.batch.tolist()


def test_add_hop_refuses_bad_ids_and_stays_resettable():
    rel = Relabeler(10)
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        rel.add_hop(np.array([3, 4, 12]), np.array([2, 1]), np.array([0, 1]))
    with pytest.raises(ValueError, match="counts sum to 2 for 3 neighbours"):
        rel.add_hop(np.array([3, 4, 5]), np.array([1, 1]), np.array([0, 1]))
    rel.reset()  # the nodes added before the bad one are cleared with it
    assert rel.add([4, 3]).tolist() == [0, 1] and len(rel) == 2


# Fused multi-hop ##################################################################################


def bfs_reference(ei, seeds, hops):
    """Nodes per hop and edge set of the full k-hop in-neighbourhood (PyG's layout)."""
    order, seen = list(seeds), set(seeds)
    edges, frontier = set(), list(seeds)
    per_hop = [len(seeds)]
    for _ in range(hops):
        new = []
        for v in frontier:
            for e in in_edges(ei, v):
                u = int(ei[0, e])
                edges.add(e)
                if u not in seen:
                    seen.add(u)
                    new.append(u)
        order += new
        per_hop.append(len(new))
        frontier = new
    return order, edges, per_hop


def test_full_fanout_is_the_k_hop_neighbourhood(graph):
    ei, colptr, row, perm = graph
    seeds = [5, 17, 0, 5]
    node, rl, cl, epos, nsn, nse, batch = neighbor_sample(colptr, row, seeds, [-1, -1])
    order, edges, per_hop = bfs_reference(ei, seeds[:3], 2)
    assert node.tolist() == seeds + order[3:] and nsn == [4] + per_hop[1:]
    assert set(perm[epos].tolist()) == edges and batch is None
    # every edge is a real edge from node[row] into node[col]
    assert np.all(ei[:, perm[epos]] == np.stack([node[rl], node[cl]]))
    assert sum(nse) == len(epos)


@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("fanout", [[-1, -1], [4, 2, 3], [40, 2]])
def test_fused_equals_driver_composition(graph, disjoint, fanout):
    ei, colptr, row, perm = graph
    seeds = np.array([3, 8, 3, 150, 21])
    a = neighbor_sample(colptr, row, seeds, fanout, False, 11, disjoint)
    out = sample_multi_hop(seeds, fanout, local_hop_fn(colptr, row, perm, False, 11), N, disjoint)
    assert out.node.tolist() == a[0].tolist()
    assert out.row.tolist() == a[1].tolist() and out.col.tolist() == a[2].tolist()
    assert out.edge.tolist() == perm[a[3]].tolist()
    assert out.num_sampled_nodes == a[4] and out.num_sampled_edges == a[5]
    assert (out.batch is None) == (a[6] is None)
    if disjoint:
        assert out.batch.tolist() == a[6].tolist()


def test_fanout_bounds_and_no_duplicate_neighbours(graph):
    ei, colptr, row, perm = graph
    seeds = np.arange(0, N, 7)
    node, rl, cl, epos, nsn, nse, _ = neighbor_sample(colptr, row, seeds, [5, 3], seed=3)
    assert np.all(ei[:, perm[epos]] == np.stack([node[rl], node[cl]]))
    hop_of_edge = np.repeat([0, 1], nse)
    for h, k in enumerate([5, 3]):
        per_dst = Counter(cl[hop_of_edge == h].tolist())
        assert max(per_dst.values()) <= k
        pairs = list(
            zip(cl[hop_of_edge == h].tolist(), epos[hop_of_edge == h].tolist(), strict=True)
        )
        assert len(set(pairs)) == len(pairs)
    assert len(set(node.tolist())) == len(node)  # no duplicate nodes (no duplicate seeds)


def test_same_seed_same_sample(graph):
    _, colptr, row, _ = graph
    seeds = np.arange(20)
    a = neighbor_sample(colptr, row, seeds, [3, 3], seed=9)
    b = neighbor_sample(colptr, row, seeds, [3, 3], seed=9)
    c = neighbor_sample(colptr, row, seeds, [3, 3], seed=10)
    assert all(np.array_equal(x, y) for x, y in zip(a[:4], b[:4], strict=True))
    assert not np.array_equal(a[3], c[3])
    assert hop_seed(9, 0) != hop_seed(9, 1)


def test_disjoint_subgraphs_are_separate_trees(graph):
    ei, colptr, row, perm = graph
    seeds = np.array([1, 1, 40])
    node, rl, cl, epos, nsn, nse, batch = neighbor_sample(colptr, row, seeds, [3, 2], True, 4, True)
    assert batch[:3].tolist() == [0, 1, 2]
    assert np.all(batch[rl] == batch[cl])  # edges never cross subgraphs
    keys = list(zip(batch.tolist(), node.tolist(), strict=True))
    assert len(set(keys)) == len(keys)  # a node appears once per subgraph
    assert np.all(ei[:, perm[epos]] == np.stack([node[rl], node[cl]]))


def test_temporal_neighbours_never_later_than_their_seed(graph):
    _, colptr, row, _ = graph
    rng = np.random.default_rng(2)
    node_time = rng.integers(0, 50, N)
    seeds = rng.integers(0, N, 30)
    seed_time = rng.integers(10, 50, 30)
    node, rl, cl, _, _, _, batch = neighbor_sample(
        colptr, row, seeds, [4, 4], False, 1, False, node_time, seed_time
    )
    assert batch is not None  # temporal sampling is disjoint
    assert np.all(node_time[node[30:]] <= seed_time[batch[30:]])
