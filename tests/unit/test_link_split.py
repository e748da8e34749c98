"""Link-prediction edge split: held-out pairs never pass messages, in either direction."""

from __future__ import annotations

import torch

from app.dataset.link_split import split_edges


def _symmetric_graph(n=300, m=2000, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, m), generator=gen)
    ei = ei[:, ei[0] != ei[1]]
    ei = torch.unique(torch.cat([ei, ei.flip(0)], dim=1), dim=1)
    return ei


def _pairs(ei):
    return {(min(u, v), max(u, v)) for u, v in ei.t().tolist()}


def test_held_out_pairs_are_absent_from_training_in_both_directions():
    ei = _symmetric_graph()
    s = split_edges(ei, seed=3)
    train = _pairs(s["train"])
    for name in ("val", "test"):
        held = _pairs(s[name])
        assert held and not held & train
        assert len(held) == s[name].size(1)  # one direction per held-out pair
    assert not _pairs(s["val"]) & _pairs(s["test"])
    assert train | _pairs(s["val"]) | _pairs(s["test"]) == _pairs(ei)
    assert s["train"].size(1) + 2 * (s["val"].size(1) + s["test"].size(1)) == ei.size(1)


def test_split_is_deterministic_and_sized():
    ei = _symmetric_graph()
    a, b = split_edges(ei, seed=1), split_edges(ei, seed=1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    num_pairs = len(_pairs(ei))
    assert a["val"].size(1) == int(num_pairs * 0.05) == a["test"].size(1)
    assert not torch.equal(split_edges(ei, seed=2)["val"], a["val"])


def test_held_out_edges_follow_a_relabelled_partition(tmp_path):
    """`partition_ids`: held-out edges (original ids) in a relabelled partition's new ids, so a
    distributed link job can run on one (locality order included); unchanged without relabel."""
    from app.dataset.link_split import HETERO_LINK_TYPE
    from app.partition import load_partition
    from app.partition.link import partition_ids
    from app.partition.writer import partition_graph
    from tests.helpers.toy import toy_graph, toy_hetero

    homo, hetero = toy_graph(200), toy_hetero()
    hetero[HETERO_LINK_TYPE].edge_index = torch.stack(
        [torch.arange(40) % 120, torch.arange(40) % 7]
    )
    hetero["field_of_study"].x = torch.randn(7, hetero["paper"].x.size(1))
    for data, edge_type in ((homo, None), (hetero, HETERO_LINK_TYPE)):
        edges = (data.edge_index if edge_type is None else data[edge_type].edge_index)[:, :30]
        for relabel in (False, True):
            root = tmp_path / f"{edge_type is not None}-{relabel}"
            order = "locality" if relabel else "original"
            partition_graph(data, root, 2, method="random", relabel=relabel, order=order)
            got = partition_ids(root, edges, edge_type)
            if not relabel:
                assert got is edges
                continue
            orig = load_partition(root, 0).orig_id  # new id -> original (per type: hetero)
            src, dst = (
                (orig, orig) if edge_type is None else (orig[edge_type[0]], orig[edge_type[2]])
            )
            assert torch.equal(torch.stack([src[got[0]], dst[got[1]]]), edges)
