"""The engine: a distributed loader made of records (sampler, inputs, batching, feeding).

`BatchEngine` takes the sampler built once, the inputs, the `EpochBatching` rule and a feeding
mode; PyG's `DistNeighborLoader` / `DistLinkNeighborLoader` only translate their keywords into
those records, so both yield the same batches. In process, on one partition (no RPC).
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data, HeteroData

from app.config import SamplerConfig
from app.distributed import DistLinkNeighborLoader, DistNeighborLoader
from app.distributed.engine import BatchEngine, Schedule, attach_labels, label_key
from app.distributed.feeding import InTrainer, SamplerProcesses, feeding_for
from app.distributed.inputs import LinkInputs, NodeInputs
from app.distributed.sampler import DistNeighborSampler, SamplerOptions
from app.distributed.server import load_stores
from app.loader.epochs import EpochBatching
from app.model.gnn import SampledGNN
from app.partition.writer import partition_graph

N = 200


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    gen = torch.Generator().manual_seed(1)
    data = Data(x=torch.randn(N, 3, generator=gen), num_nodes=N,
                edge_index=torch.randint(0, N, (2, 6 * N), generator=gen))  # fmt: skip
    root = tmp_path_factory.mktemp("engine") / "p"
    partition_graph(data, root, 1, method="random")
    return load_stores(str(root), 0)


def _same(a, b) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.n_id, y.n_id) and torch.equal(x.edge_index, y.edge_index)


def test_the_pyg_loader_is_the_engine_under_pyg_keywords(stores):
    options = SamplerOptions([3, 2])
    batching = EpochBatching(batch_size=16, shuffle=True, seed=3)
    ids = torch.arange(0, N, 2)
    engine = BatchEngine(DistNeighborSampler(stores, options=options), NodeInputs(ids), batching,
                         InTrainer(concurrency=2, rpc_timeout=30.0))  # fmt: skip
    pyg = DistNeighborLoader(stores, [3, 2], input_nodes=ids, batch_size=16, shuffle=True,
                             seed=3, concurrency=2)  # fmt: skip
    for _ in range(2):  # epochs differ, and agree
        _same(list(engine), list(pyg))
    assert engine.epoch == pyg.epoch == 2 and len(engine) == len(pyg) == 7
    assert engine.data_stats()["feature_rows"] == 0  # one partition: nothing remote
    engine.close()
    pyg.close()


def test_link_engine_draws_the_pyg_loaders_negatives(stores):
    edges = torch.randint(0, N, (2, 40), generator=torch.Generator().manual_seed(2))
    batching = EpochBatching(batch_size=8, seed=5)
    inputs = LinkInputs(edges, None, N, N, mode="binary", ratio=1.0)
    engine = BatchEngine(DistNeighborSampler(stores, options=SamplerOptions([2])), inputs,
                         batching, InTrainer(1, 30.0))  # fmt: skip
    pyg = DistLinkNeighborLoader(stores, [2], edge_label_index=edges, batch_size=8, seed=5,
                                 neg_sampling="binary")  # fmt: skip
    got, want = list(engine), list(pyg)
    _same(got, want)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a.edge_label_index, b.edge_label_index)
        assert torch.equal(a.edge_label, b.edge_label) and a.edge_label.sum() == 8
    engine.close()
    pyg.close()


def test_records_refuse_bad_values_in_one_line():
    with pytest.raises(ValueError, match="concurrency=0: pass batches in flight >= 1"):
        InTrainer(0, 30.0)
    with pytest.raises(ValueError, match="workers=\\[\\]"):
        SamplerProcesses([], 0, 1, 30.0)
    with pytest.raises(ValueError, match="input_time has shape \\(2,\\) for 3 input nodes"):
        NodeInputs(torch.arange(3), None, torch.zeros(2))
    with pytest.raises(ValueError, match="neg_sampling_ratio=1.5: triplet mode needs an integer"):
        LinkInputs(torch.zeros(2, 1, dtype=torch.long), None, 1, 1, mode="triplet", ratio=1.5)


def test_without_sampler_processes_the_trainer_samples():
    assert isinstance(feeding_for(None, 2, 1, 30.0), InTrainer)  # no context: no processes


@pytest.mark.parametrize(
    "cls", [BatchEngine, InTrainer, SamplerProcesses, NodeInputs, LinkInputs, EpochBatching]
)
def test_engine_constructors_take_at_most_eight_parameters(cls):
    assert len(inspect.signature(cls).parameters) <= 8, cls


def test_a_sampler_option_is_its_record_field_and_its_config_field():
    """`from_config` copies every `SamplerOptions` field `SamplerConfig` has, by name, and the
    PyG sampler passes every such field by keyword: a new option is declared in those two
    records (and used by the sampler), nowhere else."""
    shared = [
        f
        for f in dataclasses.fields(SamplerOptions)
        if f.name in SamplerConfig.__dataclass_fields__
    ]
    assert {f.name for f in shared} >= {"replace", "disjoint", "feature_cache_size", "time_attr"}
    cfg = SamplerConfig(num_neighbors=[2, 1])
    changed = {"replace": True, "disjoint": True, "feature_cache_size": 7, "time_attr": "t"}
    options = SamplerOptions.from_config(dataclasses.replace(cfg, **changed))
    assert all(getattr(options, k) == v for k, v in changed.items())


def _train(stores, depth: int, async_sampling: bool = True, plan: Schedule | None = None):
    """Two epochs of a small GraphSAGE over an engine with `depth` batches in flight: every
    batch's (ids, edges, features) and its loss, in the order trained."""
    torch.manual_seed(0)
    model = SampledGNN("sage", 3, 8, 4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    y = torch.randint(0, 4, (N,), generator=torch.Generator().manual_seed(4))
    sampler = DistNeighborSampler(stores, options=SamplerOptions([3, 2]))
    engine = BatchEngine(sampler, NodeInputs(torch.arange(0, N, 2)),
                         EpochBatching(batch_size=16, shuffle=True, seed=3),
                         InTrainer(depth, 30.0), async_sampling=async_sampling,
                         schedule=plan)  # fmt: skip
    trained = []
    for _ in range(2):
        for b in engine:
            out = model(b.x, b.edge_index, b.num_sampled_nodes, b.num_sampled_edges)
            loss = F.cross_entropy(out[: b.batch_size], y[b.n_id[: b.batch_size]])
            opt.zero_grad()
            loss.backward()
            opt.step()
            trained.append((b.n_id, b.edge_index, b.x, loss.item()))
    engine.close()
    return trained


def test_the_window_depth_changes_no_batch_order_or_loss(stores):
    """Overlap (batches sampled while the step runs, `depth` at once) trains exactly what
    sampling one batch when asked for it trains: same batches, same order, same losses."""
    alone = _train(stores, 1, async_sampling=False)
    assert len(alone) == 14
    across = _train(stores, 6, plan=Schedule(epochs=2))  # epoch 1's first batches in epoch 0
    for deep in (_train(stores, 1), _train(stores, 6), across):
        assert len(deep) == len(alone)
        for (n, e, x, loss), (n1, e1, x1, loss1) in zip(deep, alone, strict=True):
            assert torch.equal(n, n1) and torch.equal(e, e1) and torch.equal(x, x1)
            assert loss == loss1


class _Counted(InTrainer):
    """Threads that count the batches they were asked to sample."""

    submitted = 0

    def submit(self, sampler, request):
        self.submitted += 1
        return super().submit(sampler, request)


def test_a_schedule_samples_no_batch_past_its_cap_and_starts_the_next_epoch(stores):
    feeding = _Counted(2, 30.0)
    engine = BatchEngine(DistNeighborSampler(stores, options=SamplerOptions([3, 2])),
                         NodeInputs(torch.arange(N)), EpochBatching(batch_size=16, seed=3),
                         feeding, schedule=Schedule(epochs=2, max_batches=3))  # fmt: skip
    assert len(engine) == 3
    first = list(engine)
    assert len(first) == 3 and engine.in_flight()  # epoch 1's first batches already sampling
    assert feeding.submitted == 5  # 3 of epoch 0, then epoch 1's first 2: never 3 in flight
    second = list(engine)
    assert len(second) == 3 and feeding.submitted == 6 and not engine.in_flight()  # no epoch 2
    assert not torch.equal(first[0].n_id, second[0].n_id)
    engine.close()
    with pytest.raises(ValueError, match="Schedule\\(epochs=-1, max_batches=0\\): pass counts"):
        Schedule(epochs=-1)


def test_temporal_link_settings_come_both_or_neither(stores):
    edges = torch.randint(0, N, (2, 4), generator=torch.Generator().manual_seed(3))
    with pytest.raises(ValueError, match="edge_label_time is not set while time_attr='edge_time'"):
        DistLinkNeighborLoader(stores, [2], edge_label_index=edges, time_attr="edge_time")
    with pytest.raises(ValueError, match="edge_label_time is set while time_attr=None"):
        DistLinkNeighborLoader(stores, [2], edge_label_index=edges, edge_label_time=torch.ones(4))
    with pytest.raises(ValueError, match="edge_label_time has 3 entries for 4 links"):
        LinkInputs(edges, None, N, N, time=torch.arange(3))


def test_a_label_tensor_on_a_hetero_link_batch_labels_its_edges():
    """PyG's `feature.labels` rule: a lone tensor (a label file of per-edge ratings) gives the
    link edge type's sampled edges their `y` by global edge id; {node type: labels} the nodes."""
    rates = ("user", "rates", "movie")
    batch = HeteroData()
    batch["user"].n_id, batch["movie"].n_id = torch.tensor([3, 1]), torch.tensor([0, 2])
    batch[rates].edge_index, batch[rates].e_id = (
        torch.tensor([[0, 1], [1, 0]]),
        torch.tensor([4, 2]),
    )
    ratings = torch.arange(10.0) / 2
    attach_labels(
        batch, ratings, LinkInputs(torch.zeros(2, 1, dtype=torch.long), rates, 4, 3).label_key
    )
    assert torch.equal(batch[rates].y, ratings[[4, 2]]) and "y" not in batch["user"]
    attach_labels(batch, {"movie": torch.tensor([7, 8, 9])}, rates)
    assert torch.equal(batch["movie"].y, torch.tensor([7, 9]))
    with pytest.raises(ValueError, match="labels hold 3 rows, but the batch samples edge 4"):
        attach_labels(HeteroData({rates: {"e_id": torch.tensor([4])}}), torch.ones(3), rates)


def test_a_lone_label_tensor_is_read_by_its_length_on_a_hetero_link_loader(tmp_path):
    """One label per node of an end type: that type's node labels (a node label file beside a
    link loader); otherwise one per edge of the link type (PyG's rule)."""
    rates = ("user", "rates", "movie")
    data = HeteroData()
    data["user"].num_nodes, data["movie"].x = 6, torch.randn(4, 2)
    data[rates].edge_index = torch.tensor([[0, 1, 2, 5, 3], [0, 1, 3, 2, 2]])
    partition_graph(data, tmp_path / "p", 1, method="random")
    gs = load_stores(str(tmp_path / "p"), 0)[1]
    assert label_key(torch.ones(5), rates, gs) == rates
    assert label_key(torch.ones(4), rates, gs) == "movie"
    assert label_key({"user": torch.ones(6)}, rates, gs) == rates
    assert label_key(torch.ones(4), "movie", gs) == "movie"
