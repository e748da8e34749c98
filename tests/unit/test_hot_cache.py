"""The hot-node cache's ranking (in-process): owners rank by in-degree, the cache keeps the
highest-degree remote nodes the halo cache does not hold, as many as fit its bytes; 0 is off."""

import numpy as np
import torch

from app.distributed import LocalFeatureStore, LocalGraphStore
from app.distributed.hot_cache import choose, hot_nodes


def test_owners_rank_their_nodes_by_in_degree_ties_by_id():
    # in-degrees: node 0: 1, node 1: 3, node 2: 0, node 3: 3, node 4: 2
    dst = torch.tensor([0, 1, 1, 1, 3, 3, 3, 4, 4])
    gs = LocalGraphStore.from_data(None, torch.stack([torch.zeros_like(dst), dst]), 5)
    ids, degree = hot_nodes(gs, None, 4)
    assert ids.tolist() == [1, 3, 4, 0] and degree.tolist() == [3, 3, 2, 1]
    assert hot_nodes(gs, None, 10)[0].tolist() == [1, 3, 4, 0]  # never a node of degree 0
    assert hot_nodes(gs, None, 0)[0].numel() == 0


def test_the_cache_keeps_the_top_degrees_that_fit_and_skips_the_halo_cache():
    candidates = {
        "a": (np.array([10, 11, 12, 13]), np.array([9, 7, 5, 1])),  # from every peer, merged
        "b": (np.array([20, 21]), np.array([8, 7])),
    }
    row_bytes = {"a": 100, "b": 300}
    got = choose(candidates, {"a": np.array([10])}, row_bytes, budget=700)
    # by degree: 20 (8, b), 11 (7, a), 21 (7, b): 700 bytes; 10 is in the halo cache
    assert {k: v.tolist() for k, v in got.items()} == {"a": [11], "b": [20, 21]}
    assert choose(candidates, {}, row_bytes, budget=99) == {}  # not even one row fits
    assert choose({}, {}, {}, budget=10**9) == {}


def test_zero_bytes_turns_the_hot_cache_off():
    x = torch.arange(12, dtype=torch.float32).view(6, 2)
    fs = LocalFeatureStore.from_data(torch.arange(6), x=x, y=torch.arange(6))
    gs = LocalGraphStore.from_data(None, torch.tensor([[0, 1], [1, 2]]), 6)
    assert fs.row_nbytes(None) == 2 * 4 + 8  # a row of x and of y: what a cached node costs
    fs.use_cache(10, gs, hot_bytes=1000)
    assert fs._hot_want == (1000, 10, gs)
    fs.use_cache(10, gs, hot_bytes=0)
    assert fs._hot_want is None and fs._hot_cache() is None
    assert fs.counters()["hot_cache_rows"] == 0 and fs.counters()["hot_cache_hit_rate"] == 0.0
    assert torch.equal(fs.fetch(torch.tensor([4, 1]))["x"], x[[4, 1]])  # served as before
