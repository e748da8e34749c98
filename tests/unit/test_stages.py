"""`app.sampler.stages`: per-stage thread CPU accounting of batch building, which the bench
reads to report where a batch's CPU goes."""

from __future__ import annotations

import time

import pytest

from app.loader import NeighborLoader
from app.sampler import stages
from app.sampler.stages import stage
from tests.helpers.toy import toy_graph


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _delta(before: dict[str, float]) -> dict[str, float]:
    return {k: v - before[k] for k, v in stages.snapshot().items()}


def test_nested_stages_count_exclusive_time():
    before = stages.snapshot()
    with stage("relabel"):
        _spin(0.02)
        with stage("kernel"):
            _spin(0.03)
        _spin(0.02)
    spent = _delta(before)
    # every second spent inside lands on exactly one stage: the innermost running
    assert spent["kernel"] == pytest.approx(0.03, abs=0.01)
    assert spent["relabel"] == pytest.approx(0.04, abs=0.01)
    assert sum(spent.values()) == pytest.approx(0.07, abs=0.015)


def test_unknown_stage_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown stage 'sampling'"):
        with stage("sampling"):
            pass


def test_a_loader_batch_is_split_into_stages():
    data = toy_graph()
    loader = NeighborLoader(data, [3, 2], batch_size=8)
    before = stages.snapshot()
    next(iter(loader))
    spent = _delta(before)
    assert spent["kernel"] > 0 and spent["features"] > 0 and spent["assembly"] > 0
    assert spent["route"] == 0 and spent["handoff"] == 0  # nothing distributed here
