"""The routing helper shared by hops, feature rows and DistTensor (`app.distributed.routing`),
and the one-pass row gather the feature store writes batches with."""

from __future__ import annotations

import numpy as np

from app.distributed.feature_store import gather_rows
from app.distributed.routing import merge_ragged, merge_rows, route, split_by_owner


class _Answer:
    """An answer that is already there (what `rpc.PendingCall.wait` returns, in-process)."""

    def __init__(self, value, log: list) -> None:
        self.value, self.log = value, log

    def wait(self):
        self.log.append("wait")
        return self.value


def test_split_by_owner_groups_positions_and_says_all_for_one_owner():
    split = split_by_owner(np.array([1, 0, 1, 2, 0]))
    assert {p: w.tolist() for p, w in split.items()} == {0: [1, 4], 1: [0, 2], 2: [3]}
    assert split_by_owner(np.array([3, 3])) == {3: None}
    assert split_by_owner(np.empty(0, np.int64)) == {}


def test_split_by_owner_agrees_for_few_and_many_partitions():
    owner = np.random.default_rng(0).integers(0, 40, 5000)
    for parts in (2, 7, 40):  # a scan per partition below SCAN_PARTS, a 16-bit sort above
        got = split_by_owner(owner % parts)
        want = {p: np.flatnonzero(owner % parts == p) for p in range(parts)}
        assert set(got) == set(want)
        assert all(np.array_equal(got[p], want[p]) for p in want)


def test_route_starts_every_remote_call_before_the_local_part_and_merges_in_request_order():
    ids = np.array([10, 20, 11, 30, 21])
    owner = ids // 10 - 1  # partitions 0, 1, 0, 2, 1
    split, log = split_by_owner(owner), []

    def call(p, where):
        log.append(f"call {p}")
        return _Answer(ids[where] * 2, log)

    def run(p, where):
        log.append(f"run {p}")
        return ids[where] * 2

    answers = route(split, {0}, call, run)
    assert log == ["call 1", "call 2", "run 0", "wait", "wait"]
    assert merge_rows(split, answers, np.zeros(5, np.int64)).tolist() == (ids * 2).tolist()


def test_merge_ragged_interleaves_variable_length_answers():
    # frontier of 3 nodes: positions 0 and 2 on one partition, 1 on another
    a = (np.array([1, 2, 3]), np.array([7, 8, 9]), np.array([2, 1]))  # node 0: 1,2; node 2: 3
    b = (np.array([5]), np.array([6]), np.array([1]))  # node 1: 5
    nbrs, eids, counts = merge_ragged([(np.array([0, 2]), a), (np.array([1]), b)], 3)
    assert nbrs.tolist() == [1, 2, 5, 3] and eids.tolist() == [7, 8, 6, 9]
    assert counts.tolist() == [2, 1, 1]


def test_gather_rows_writes_each_row_once_in_place():
    rng = np.random.default_rng(0)
    src = rng.random((50, 3), dtype=np.float32)
    rows, where = rng.integers(0, 50, 20), rng.permutation(30)[:20]
    dst, ref = np.zeros((30, 3), np.float32), np.zeros((30, 3), np.float32)
    gather_rows(src, rows, dst, where)
    ref[where] = src[rows]
    assert np.array_equal(dst, ref)
    labels, out = np.arange(50), np.full(20, -1)
    gather_rows(labels, rows, out, None)
    assert out.tolist() == rows.tolist()
