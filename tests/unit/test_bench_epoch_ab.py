"""`bench.epoch_ab`'s turns: both trees run equally often, each round in the reverse order of
the one before, so a load that rises or falls during the A/B weighs on both alike."""

from __future__ import annotations

import pytest

from bench.epoch_ab import order, paired_ratio


def test_rounds_alternate_which_tree_runs_first():
    assert order(1) == ["old", "new"]
    assert order(3) == ["old", "new", "new", "old", "old", "new"]
    assert order(4).count("old") == order(4).count("new") == 4


def test_the_ratio_is_the_median_of_each_rounds_own():
    # the load halved after round 0: the medians' ratio would read 2.2, two rounds of 3 read 1.1
    assert paired_ratio([20.0, 10.0, 10.0], [22.0, 11.0, 30.0]) == pytest.approx(1.1)
