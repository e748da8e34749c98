"""`bench.epoch_ab`'s turns: both trees run equally often, each round in the reverse order of
the one before, so a load that rises or falls during the A/B weighs on both alike."""

from __future__ import annotations

from bench.epoch_ab import order


def test_rounds_alternate_which_tree_runs_first():
    assert order(1) == ["old", "new"]
    assert order(3) == ["old", "new", "new", "old", "old", "new"]
    assert order(4).count("old") == order(4).count("new") == 4
