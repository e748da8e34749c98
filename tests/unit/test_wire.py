"""Ids on the wire: int32 only where the graph's id space allows it, hop messages packed."""

import numpy as np
import pytest
import torch

from app.distributed.wire import (
    IdWire,
    narrow_rows,
    nbytes,
    rows_numpy,
    unpack_reply,
    unpack_request,
)

BIG = 2**31 + 10  # an id space past int32


def test_widths_follow_the_id_space_not_the_message():
    small = IdWire.of({"num_nodes": 1000, "num_edges": 5000})
    assert (small.node_dtype, small.edge_dtype) == (torch.int32, torch.int32)
    hetero = IdWire.of({"num_nodes": {"paper": 10, "author": BIG}, "num_edges": 7})
    assert (hetero.node_dtype, hetero.edge_dtype) == (torch.int64, torch.int32)
    assert IdWire.of({}).node_dtype == torch.int64  # PyG's in-memory stores: no META counts
    # a big id space sends int64 even for a message of small ids: the width is per store
    assert IdWire(nodes=BIG).nodes_out(np.array([1, 2])).dtype == torch.int64
    assert IdWire(nodes=BIG).nodes_out(np.array([BIG - 1])).item() == BIG - 1


def test_int32_is_refused_where_the_id_space_needs_int64():
    with pytest.raises(
        ValueError, match=r"node ids as int32 on the wire: the graph has 2147483658"
    ):
        IdWire(nodes=BIG, node_dtype=torch.int32)
    with pytest.raises(ValueError, match="edge ids as int32"):
        IdWire(edges=BIG, edge_dtype=torch.int32)
    assert IdWire(nodes=2**31, node_dtype=torch.int32).node_dtype == torch.int32  # ids < 2^31


def test_an_id_outside_the_space_is_refused_not_wrapped():
    with pytest.raises(ValueError, match="node id 1000 is outside the graph's 1000 node ids"):
        IdWire(nodes=1000).nodes_out(np.array([3, 1000]))
    with pytest.raises(ValueError, match="node id -1 is outside"):
        IdWire(nodes=1000).nodes_out(np.array([-1, 3]))


def test_hop_request_and_reply_are_three_arrays_whatever_the_jobs():
    w = IdWire(nodes=100, edges=1000)
    f1, f2 = np.array([5, 7, 9], np.int64), np.array([1], np.int64)
    jobs = [(("a", "r", "b"), f1, 10, 3, None), (("c", "r", "b"), f2, 5, 4, None)]
    heads, front, times = w.pack_request(jobs)
    assert heads == [(("a", "r", "b"), 10, 3, 3), (("c", "r", "b"), 5, 4, 1)]
    assert front.dtype == torch.int32 and times is None
    assert nbytes([front, times]) == 4 * 4  # four ids of 4 bytes: nothing per job or fan-out
    back = unpack_request((heads, front, times))
    assert [j[0] for j in back] == [j[0] for j in jobs]
    assert all(
        np.array_equal(a[1], b[1]) and a[1].dtype == np.int64
        for a, b in zip(back, jobs, strict=True)
    )
    results = [
        (np.array([1, 2, 3], np.int64), np.array([10, 11, 12], np.int64), np.array([2, 0, 1])),
        (np.array([99], np.int64), np.array([999], np.int64), np.array([1])),
    ]
    reply = w.pack_reply(results)
    assert [t.dtype for t in reply] == [torch.int32] * 3 and len(reply) == 3
    for (n, e, c), (n2, e2, c2) in zip(unpack_reply(reply, [3, 1]), results, strict=True):
        assert np.array_equal(n, n2) and np.array_equal(e, e2) and np.array_equal(c, c2)
        assert n.dtype == e.dtype == c.dtype == np.int64


def test_seed_times_travel_in_one_array():
    w = IdWire(nodes=100, edges=1000)
    jobs = [
        (None, np.array([1, 2]), 3, 0, np.array([7, 8])),
        (None, np.array([4]), 3, 1, np.array([9])),
    ]
    heads, front, times = w.pack_request(jobs)
    assert times.tolist() == [7, 8, 9]
    assert [j[4].tolist() for j in unpack_request((heads, front, times))] == [[7, 8], [9]]


def test_features_travel_as_stored_unless_narrowing_is_opted_in():
    wide = torch.tensor([[1.0001, 2.5]], dtype=torch.float32)
    half = wide.half()
    labels = torch.tensor([3, 4])
    assert narrow_rows(wide, "store") is wide  # never narrower than stored by default
    assert narrow_rows(half, "store") is half  # a float16 store sends float16
    assert narrow_rows(wide, "float16").dtype == torch.float16  # the opt-in
    assert narrow_rows(wide, "bfloat16").dtype == torch.bfloat16
    assert narrow_rows(half, "bfloat16") is half  # 16-bit rows are never rounded again
    assert narrow_rows(labels, "float16") is labels  # integers (labels) never change
    assert rows_numpy(narrow_rows(wide, "bfloat16")).dtype == np.float32  # numpy has no bf16
    with pytest.raises(ValueError, match="feature_wire_dtype='fp8': expected one of store"):
        narrow_rows(wide, "fp8")
