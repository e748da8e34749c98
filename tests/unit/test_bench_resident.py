"""`bench.resident`'s accounting, in process on one partition: a pass counts the rows and bytes
the sampler sent, the held share and the fill, and its pairing of the two loaders' batches
fails when they differ (the 2-partition job itself: `python -m bench.resident`)."""

from __future__ import annotations

import time

import pytest
import torch
from torch_geometric.data import Data

from app.distributed.engine import BatchEngine, Schedule
from app.distributed.feeding import InTrainer
from app.distributed.inputs import NodeInputs
from app.distributed.resident import DeviceRows, ResidentRows
from app.distributed.sampler import DistNeighborSampler, SamplerOptions
from app.distributed.server import load_stores
from app.loader.epochs import EpochBatching
from app.partition.writer import partition_graph
from app.sampler import stages
from bench.resident import HostCopy, Pairing, Pass, run_pass, summarize

N, HELD = 400, 150


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    gen = torch.Generator().manual_seed(2)
    data = Data(x=torch.randn(N, 6, generator=gen), y=torch.randint(0, 4, (N,), generator=gen),
                edge_index=torch.randint(0, N, (2, 6 * N), generator=gen), num_nodes=N)  # fmt: skip
    root = tmp_path_factory.mktemp("bench_resident") / "p"
    partition_graph(data, root, 1, method="random")
    return load_stores(str(root), 0)


def _engine(stores, k: int) -> BatchEngine:
    sampler = DistNeighborSampler(stores, options=SamplerOptions([4, 2], resident_rows=k))
    batching = EpochBatching(batch_size=40, shuffle=True, seed=3)
    seeds = NodeInputs(torch.arange(0, N, 2))
    return BatchEngine(sampler, seeds, batching, InTrainer(2, 30.0), schedule=Schedule(0, 4))


def _stats() -> dict[str, float]:
    return {
        "cpu_s": time.process_time(),
        **{f"stage_{k}_s": v for k, v in stages.snapshot().items()},
    }


def test_a_pass_counts_what_the_sampler_sent_and_what_the_trainer_held(stores):
    fs, gs = stores
    index = ResidentRows(fs, gs, HELD)
    rows = DeviceRows(index, ["x", "y"], torch.device("cpu"))
    a, b = _engine(stores, 0), _engine(stores, HELD)
    held = []
    pairing = Pairing(["x", "y"], exact=True)

    def seen(position, batch):
        held.append(int((torch.from_numpy(index.slots(batch.n_id.numpy())) >= 0).sum()))
        pairing(position, batch)

    got_a = run_pass(a, None, ["x", "y"], _stats, pairing)
    pairing.second()
    got_b = run_pass(b, rows, ["x", "y"], _stats, seen)
    assert got_a.batches == got_b.batches == 4 and got_a.nodes == got_b.nodes
    assert got_a.ring_rows == got_a.nodes  # every row sent
    assert got_b.ring_rows == got_b.nodes - sum(held) and sum(held) > 0
    assert got_b.ring_bytes == {"x": 6 * 4 * got_b.ring_rows, "y": 8 * got_b.ring_rows}
    assert got_b.fill_cpu_s > 0 and got_a.fill_cpu_s == 0 and got_a.host_copy_cpu_s > 0
    sa, sb = summarize(got_a), summarize(got_b)
    assert sa["hit_rate"] == 0 and sb["hit_rate"] == pytest.approx(sum(held) / got_b.nodes)
    # what a device copy moves: the held rows (x: 6 float32, y: int64) less, an int32 slot
    # per node and the int64 position of each row sent more
    hits, sent = sum(held), got_b.ring_rows
    assert got_b.copy_bytes == got_a.copy_bytes - 32 * hits + 4 * got_b.nodes + 8 * sent
    assert sb["sampler_cpu_per_batch"] > 0 and sb["batches_per_s"] > 0
    total = Pass(ring_bytes={"x": 0, "y": 0})
    total.add(got_a)
    total.add(got_b)
    assert total.nodes == 2 * got_a.nodes and total.ring_bytes["x"] == (
        got_a.ring_bytes["x"] + got_b.ring_bytes["x"]
    )
    assert run_pass(a, None, ["x"], _stats, lambda *_: None, limit=2).batches == 2
    a.close()
    b.close()


def test_the_pairing_fails_on_batches_that_differ(stores):
    a = _engine(stores, 0)
    pairing = Pairing(["x", "y"], exact=False)
    run_pass(a, None, ["x", "y"], _stats, pairing)  # epoch 0
    pairing.second()
    with pytest.raises(AssertionError, match="batch 0: n_id differs"):
        run_pass(a, None, ["x", "y"], _stats, pairing)  # epoch 1: other seeds
    a.close()


def test_the_host_copy_copies_every_tensor_into_buffers_it_keeps(stores):
    engine = _engine(stores, HELD)
    batch = next(iter(engine))
    host = HostCopy()
    host(batch)
    kept = {k: b.data_ptr() for k, b in host.buffers.items()}
    host(batch)
    assert {k: b.data_ptr() for k, b in host.buffers.items()} == kept  # reused, not remade
    for key, t in batch:
        if isinstance(t, torch.Tensor):
            assert torch.equal(host.buffers[key][: t.nbytes].view(t.dtype).view(t.shape), t)
    assert {"x", "y", "n_id", "edge_index", "resident_slot", "resident_miss"} <= set(kept)
    engine.close()
