"""Link-prediction edge split: held-out pairs never pass messages, in either direction."""

from __future__ import annotations

import torch

from app.partition.link import split_edges


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
