"""Local loaders: NeighborLoader / LinkNeighborLoader layout, epochs, and the batch builders."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch_geometric.data import Data, HeteroData

from app.loader import LinkNeighborLoader, NeighborLoader, to_data
from app.sampler.neighbor import NeighborSampler

N = 100


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    ei = torch.from_numpy(rng.integers(0, N, (2, 800)))
    return Data(
        x=torch.randn(N, 5),
        y=torch.randint(0, 4, (N,)),
        time=torch.arange(N) % 13,
        edge_index=ei,
        edge_attr=torch.randn(800, 2),
        num_nodes=N,
    )


@pytest.fixture(scope="module")
def hetero():
    """author → writes → paper ← cites ← paper, topic → tags → paper; topic: no features."""
    rng = np.random.default_rng(1)
    d = HeteroData()
    d["paper"].x, d["paper"].y = torch.randn(40, 3), torch.randint(0, 2, (40,))
    d["paper"].time = torch.arange(40) % 7
    d["author"].x, d["author"].time = torch.randn(25, 2), torch.arange(25) % 5
    d["topic"].num_nodes = 5
    d["paper", "cites", "paper"].edge_index = torch.from_numpy(rng.integers(0, 40, (2, 150)))
    d["author", "writes", "paper"].edge_index = torch.stack(
        [torch.from_numpy(rng.integers(0, 25, 80)), torch.from_numpy(rng.integers(0, 40, 80))]
    )
    d["topic", "tags", "paper"].edge_index = torch.stack(
        [torch.from_numpy(rng.integers(0, 5, 30)), torch.from_numpy(rng.integers(0, 40, 30))]
    )
    return d


def test_node_loader_layout(data):
    loader = NeighborLoader(data, [4, 2], input_nodes=torch.arange(10, 30), batch_size=8)
    batch = next(iter(loader))
    keys = set(batch.keys())
    assert {"x", "y", "time", "edge_index", "edge_attr", "n_id", "e_id"} <= keys
    assert {"batch_size", "num_sampled_nodes", "num_sampled_edges", "input_id"} <= keys
    assert batch.batch_size == 8 and batch.input_id.tolist() == list(range(8))
    assert batch.n_id[:8].tolist() == list(range(10, 18))
    assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.y, data.y[batch.n_id])
    assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
    assert batch.num_nodes == batch.n_id.numel() == sum(batch.num_sampled_nodes)
    assert len(loader) == 3


def test_epoch_covers_each_input_once_and_shuffles_reproducibly(data):
    mask = torch.zeros(N, dtype=torch.bool)
    mask[::3] = True

    def epoch_seeds(loader):
        return torch.cat([b.n_id[: b.batch_size] for b in loader]).tolist()

    a = NeighborLoader(data, [2], input_nodes=mask, batch_size=7, shuffle=True, seed=5)
    b = NeighborLoader(data, [2], input_nodes=mask, batch_size=7, shuffle=True, seed=5)
    e0, e1 = epoch_seeds(a), epoch_seeds(a)
    assert sorted(e0) == sorted(e1) == list(range(0, N, 3))  # every input exactly once
    assert e0 != e1  # a new order each epoch
    assert epoch_seeds(b) == e0 and epoch_seeds(b) == e1  # same seed, same epochs
    first = next(
        iter(NeighborLoader(data, [3], input_nodes=mask, batch_size=7, shuffle=True, seed=5))
    )
    again = next(
        iter(NeighborLoader(data, [3], input_nodes=mask, batch_size=7, shuffle=True, seed=5))
    )
    assert torch.equal(first.e_id, again.e_id)  # same sampled neighbours too
    assert first.input_id.tolist() == first.n_id[:7].tolist()  # mask input: input_id = node id


def test_drop_last_and_len(data):
    loader = NeighborLoader(data, [2], batch_size=30, drop_last=True)
    sizes = [b.batch_size for b in loader]
    assert len(loader) == 3 and sizes == [30, 30, 30]
    assert len(NeighborLoader(data, [2], batch_size=30)) == 4
    with pytest.raises(ValueError, match="batch_size"):
        NeighborLoader(data, [2], batch_size=0)
    with pytest.raises(ValueError, match="input_nodes holds ids"):
        NeighborLoader(data, [2], input_nodes=torch.tensor([N]))


def test_temporal_and_disjoint_loader(data):
    loader = NeighborLoader(data, [3, 3], batch_size=10, time_attr="time")
    for batch in loader:
        assert torch.all(batch.time <= batch.seed_time[batch.batch])
    dis = next(iter(NeighborLoader(data, [3], batch_size=4, disjoint=True)))
    assert dis.batch[:4].tolist() == [0, 1, 2, 3]


def test_hetero_loader_layout(hetero):
    loader = NeighborLoader(hetero, [3, 2], input_nodes=("paper", torch.arange(12)), batch_size=5)
    batch = next(iter(loader))
    assert batch["paper"].batch_size == 5 and batch["paper"].n_id[:5].tolist() == list(range(5))
    assert torch.equal(batch["author"].x, hetero["author"].x[batch["author"].n_id])
    assert "x" not in batch["topic"] and batch["topic"].num_nodes == batch["topic"].n_id.numel()
    for et in hetero.edge_types:
        src, _, dst = et
        glob = torch.stack(
            [batch[src].n_id[batch[et].edge_index[0]], batch[dst].n_id[batch[et].edge_index[1]]]
        )
        assert torch.equal(hetero[et].edge_index[:, batch[et].e_id], glob)
        assert len(batch[et].num_sampled_edges) == 2
    assert len(loader) == 3
    tl = NeighborLoader(hetero, [3, 2], input_nodes="paper", batch_size=8, time_attr="time")
    for b in tl:
        seed_time = b["paper"].seed_time
        assert torch.all(b["author"].time <= seed_time[b["author"].batch])


def test_link_loader_binary(data):
    loader = LinkNeighborLoader(
        data, [3], edge_label_index=data.edge_index[:, :40], neg_sampling="binary",
        neg_sampling_ratio=2.0, batch_size=10, shuffle=True,
    )  # fmt: skip
    seen = []
    for batch in loader:
        eli, label = batch.edge_label_index, batch.edge_label
        assert eli.shape == (2, 30) and label.tolist() == [1.0] * 10 + [0.0] * 20
        pos = batch.n_id[eli[:, :10]]
        assert torch.equal(pos, data.edge_index[:, batch.input_id])  # positives are real edges
        seen += batch.input_id.tolist()
    assert sorted(seen) == list(range(40))


def test_link_loader_triplet_and_labels(data):
    loader = LinkNeighborLoader(
        data, [2], neg_sampling="triplet", neg_sampling_ratio=2, batch_size=16
    )
    batch = next(iter(loader))
    assert batch.src_index.shape == (16,) and batch.dst_neg_index.shape == (16, 2)
    assert torch.equal(batch.n_id[batch.dst_pos_index], data.edge_index[1, :16])
    assert "edge_label_index" not in batch
    with pytest.raises(ValueError, match="no edge_label"):
        LinkNeighborLoader(data, [2], edge_label=torch.ones(800), neg_sampling="triplet")
    labelled = LinkNeighborLoader(
        data,
        [2],
        edge_label=torch.zeros(800, dtype=torch.long),
        neg_sampling="binary",
        batch_size=4,
    )
    assert next(iter(labelled)).edge_label.tolist() == [1, 1, 1, 1, 0, 0, 0, 0]  # shifted by +1
    with pytest.raises(ValueError, match="neg_sampling must be"):
        LinkNeighborLoader(data, [2], neg_sampling="ternary")


def test_hetero_link_loader(hetero):
    et = ("author", "writes", "paper")
    loader = LinkNeighborLoader(
        hetero, [2], edge_label_index=et, neg_sampling="binary", batch_size=8
    )
    batch = next(iter(loader))
    eli = batch[et].edge_label_index
    assert torch.equal(batch["author"].n_id[eli[0, :8]], hetero[et].edge_index[0, :8])
    assert torch.equal(batch["paper"].n_id[eli[1, :8]], hetero[et].edge_index[1, :8])
    assert batch[et].edge_label[8:].sum() == 0


def test_to_data_takes_remotely_fetched_features(data):
    """The distributed loader's path: sample, fetch rows elsewhere, build the batch."""
    sampler = NeighborSampler(data, [2])
    loader = NeighborLoader(data, [2], batch_size=4, sampler=sampler)
    out = sampler.sample_from_nodes(loader.sampler_input(torch.arange(4)))
    x = torch.full((out.node.numel(), 1), 7.0)  # stands in for fetched rows
    batch = to_data(out, x, data.y[out.node])
    assert batch.x.shape == (out.node.numel(), 1) and batch.batch_size == 4
    assert torch.equal(batch.edge_index, torch.stack([out.row, out.col]))


def test_temporal_link_loader(data):
    times = torch.full((800,), 8)
    for neg in ("binary", "triplet"):
        loader = LinkNeighborLoader(
            data, [3, 2], neg_sampling=neg, batch_size=16, time_attr="time", edge_label_time=times
        )
        batch = next(iter(loader))
        assert torch.all(batch.time[batch.num_sampled_nodes[0] :] <= 8)  # sampled, not seeds
        negs = batch.edge_label_index[:, 16:] if neg == "binary" else batch.dst_neg_index
        assert torch.all(batch.time[negs] <= 8)  # negatives respect the link time too
    with pytest.raises(ValueError, match="edge_label_time"):
        LinkNeighborLoader(data, [2], time_attr="time")


def test_threads_yield_the_same_batches_in_order():
    """Sampling ahead in threads (a GPU trainer's feed) changes no batch; an early stop ends
    the threads."""
    from tests.helpers.toy import toy_graph

    data = toy_graph(500)

    def batches(threads: int) -> list:
        loader = NeighborLoader(
            data, [5, 3], input_nodes=torch.arange(300), batch_size=32, shuffle=True, seed=4,
            threads=threads,
        )  # fmt: skip
        return list(loader)

    plain, threaded = batches(0), batches(3)
    assert len(plain) == len(threaded) == 10
    for a, b in zip(plain, threaded, strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
    loader = NeighborLoader(data, [5, 3], input_nodes=torch.arange(300), batch_size=8, threads=2)
    it = iter(loader)
    next(it)
    it.close()  # the pool is shut down, pending batches cancelled
    assert not [t for t in threading.enumerate() if t.name.startswith("sampler")]
