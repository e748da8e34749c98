"""Rows a GPU trainer holds (`app.distributed.resident`), in process on one partition.

A sampler told `resident_rows` leaves out the rows its trainer holds and sends each node's slot;
the trainer's fill (`DeviceRows`, on the CPU here: the same code as on a GPU) rebuilds every
attribute exactly as the sampler that sends every row would have; the held rows are the
highest in-degree ones when not all fit. With remote partitions and caches:
tests/helpers/dist_procs.py `check_cache`; a whole job: tests/dist/test_dist_resident.py.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from app.distributed.engine import BatchEngine
from app.distributed.feeding import InTrainer
from app.distributed.inputs import NodeInputs
from app.distributed.resident import DeviceRows, ResidentRows
from app.distributed.sampler import DistNeighborSampler, SamplerOptions
from app.distributed.server import load_stores
from app.loader.epochs import EpochBatching
from app.partition.writer import partition_graph
from app.sampler.output import MISS, SLOT
from app.task.device import DeviceLoader

N = 300


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    gen = torch.Generator().manual_seed(4)
    dst = torch.randint(0, N, (5 * N,), generator=gen) ** 2 // N  # skewed in-degrees
    data = Data(x=torch.randn(N, 4, generator=gen), y=torch.randint(0, 5, (N,), generator=gen),
                edge_index=torch.stack([torch.randint(0, N, (5 * N,), generator=gen), dst]),
                num_nodes=N)  # fmt: skip
    root = tmp_path_factory.mktemp("resident") / "p"
    partition_graph(data, root, 1, method="random")
    return data, load_stores(str(root), 0)


def _engine(stores, resident: int) -> BatchEngine:
    options = SamplerOptions([4, 3], resident_rows=resident)
    return BatchEngine(
        DistNeighborSampler(stores, options=options), NodeInputs(torch.arange(0, N, 3)),
        EpochBatching(batch_size=32, shuffle=True, seed=7), InTrainer(2, 30.0),
    )  # fmt: skip


@pytest.mark.parametrize("k", [N, N // 3, 1])
def test_filled_batches_equal_batches_that_carry_every_row(graph, k):
    data, stores = graph
    plain, resident = _engine(stores, 0), _engine(stores, k)
    rows = DeviceRows(ResidentRows(*stores, k), ["x", "y"], torch.device("cpu"))
    carried = 0
    for want, got in zip(plain, resident, strict=True):
        assert torch.equal(want.n_id, got.n_id) and torch.equal(want.edge_index, got.edge_index)
        held = got[SLOT].numel() - got[MISS].numel()
        assert got.x.size(0) == got.n_id.numel() - held  # only the rows the trainer lacks
        carried += got.x.size(0)
        rows.fill(got)
        assert SLOT not in got and MISS not in got
        for key in ("x", "y"):
            assert torch.equal(got[key], want[key]) and torch.equal(got[key], data[key][got.n_id])
    if k == N:
        assert carried == 0  # one partition, all of it held: the sampler sends no row
    assert rows.tables["x"].size(0) == k
    plain.close()
    resident.close()


def test_the_fill_never_waits_for_the_device(graph):
    """The fill is gathers and a scatter of known sizes (counted on the CPU by `ReadBacks`, the
    table and the copied batch marked as on the device): no read-back, so the side stream
    that copies a batch never makes the host wait for the step before it."""
    from bench.readbacks import ReadBacks

    _, stores = graph
    rows = DeviceRows(ResidentRows(*stores, N // 2), ["x", "y"], torch.device("cpu"))
    engine = _engine(stores, N // 2)
    batch = next(iter(engine))
    counter = ReadBacks(torch.device("cpu"))
    counter.on_device(*rows.tables.values(), batch[SLOT], batch[MISS], batch.x, batch.y)
    with counter:
        rows.fill(batch)
    assert counter.counts == {} and batch.x.size(0) == batch.n_id.numel()
    engine.close()


def test_when_not_all_fit_the_highest_in_degree_rows_are_held(graph):
    data, (fs, gs) = graph
    index = ResidentRows(fs, gs, 40)
    slots = index.slots(np.arange(N))
    held = np.flatnonzero(slots >= 0)
    degree = torch.bincount(data.edge_index[1], minlength=N).numpy()
    assert held.size == 40 and np.array_equal(np.sort(slots[held]), np.arange(40))
    assert degree[held].min() >= np.delete(degree, held).max()
    table = torch.cat(list(index.blocks("x", rows=7)))  # blocks of 7 rows: the same table
    assert torch.equal(table[slots[held]], data.x[held])
    assert (
        ResidentRows(fs, gs, N).slots(np.arange(N)).tolist() == fs.local_rows(np.arange(N)).tolist()
    )  # all of it held: slot = row, no ranking


def test_the_device_loader_fills_and_logs_the_hit_rate(graph, caplog, monkeypatch):
    def no_cuda(*args: object) -> None:
        raise AssertionError("a CPU trainer touched CUDA (on a GPU machine: a context)")

    monkeypatch.setattr(torch.cuda, "stream", no_cuda)
    monkeypatch.setattr(torch.cuda, "current_stream", no_cuda)
    data, stores = graph
    rows = DeviceRows(ResidentRows(*stores, N // 2), ["x", "y"], torch.device("cpu"))
    loader = DeviceLoader(_engine(stores, N // 2), torch.device("cpu"), rows)
    with caplog.at_level(logging.INFO, logger="distgnn.train"):
        batches = list(loader)
    assert batches and all(torch.equal(b.x, data.x[b.n_id]) for b in batches)
    line = [r.getMessage() for r in caplog.records if "resident rows" in r.getMessage()]
    rate = float(line[0].rsplit(" ", 1)[1])
    assert line[0].startswith(f"resident rows after epoch 0: {N // 2} on cpu") and 0.5 < rate < 1.0
    loader.close()


def test_a_partition_with_node_times_refuses_resident_rows(tmp_path):
    gen = torch.Generator().manual_seed(5)
    data = Data(x=torch.randn(50, 2, generator=gen), time=torch.arange(50), num_nodes=50,
                edge_index=torch.randint(0, 50, (2, 200), generator=gen))  # fmt: skip
    partition_graph(data, tmp_path / "p", 1, method="random")
    stores = load_stores(str(tmp_path / "p"), 0)
    for options in (  # temporal sampling; node times kept by id, which no table row holds
        SamplerOptions([2], time_attr="time", resident_rows=5),
        SamplerOptions([2], resident_rows=5),
    ):
        with pytest.raises(ValueError, match="resident_rows=5: a trainer holds rows of homo"):
            DistNeighborSampler(stores, options=options)
