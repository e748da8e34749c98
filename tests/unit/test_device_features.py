"""`DeviceFeatures` (a GPU feature copy or hot-row cache) on the CPU: gathered rows equal the
uncached rows, the hottest rows are the cached ones, and the hit rate counts a known pattern."""

from __future__ import annotations

import logging

import pytest
import torch

from app.config import KERNELS_ENV, Config, DatasetConfig, ModelConfig, validate
from app.loader.device_features import DeviceFeatures, auto_budget
from app.task.local import LocalSource
from bench.readbacks import ReadBacks
from tests.helpers.toy import toy_graph

CPU = torch.device("cpu")
N, F = 100, 6


@pytest.fixture
def x():
    return torch.randn(N, F)


def row_bytes(x: torch.Tensor) -> int:
    return x[:1].numel() * x.element_size()


def test_whole_copy_when_it_fits(x):
    rows = DeviceFeatures(x, CPU, N * row_bytes(x))
    assert rows.whole and rows.cached_rows == N
    idx = torch.tensor([3, 99, 3, 0])
    assert torch.equal(rows(idx), x[idx])
    assert rows.hit_rate() == 1.0


def test_partial_cache_holds_the_hottest_rows_and_counts_hits(x):
    degree = torch.arange(N)  # node 99 the hottest
    rows = DeviceFeatures(x, CPU, 10 * row_bytes(x) + 5, degree)
    assert not rows.whole and rows.cached_rows == 10
    assert torch.equal(rows.cache, x[torch.arange(99, 89, -1)])
    idx = torch.tensor([95, 5, 99, 0, 91])  # 3 hot, 2 from the host
    assert torch.equal(rows(idx), x[idx])
    assert rows.hit_rate() == pytest.approx(3 / 5)
    assert rows.hit_rate() == 1.0  # reset: nothing asked since
    rows(torch.tensor([90, 90])), rows(torch.tensor([89, 1, 2, 50]))
    assert rows.hit_rate(reset=False) == pytest.approx(2 / 6)
    g = torch.Generator().manual_seed(0)
    many = torch.randint(0, N, (1000,), generator=g)
    rows.hit_rate()
    assert torch.equal(rows(many), x[many])
    assert rows.hit_rate() == pytest.approx(float((many >= 90).float().mean()))


def test_no_budget_gathers_everything_from_the_host_and_keeps_the_dtype():
    half = torch.randn(N, F).half()
    rows = DeviceFeatures(half, CPU, 0, torch.ones(N))
    idx = torch.tensor([4, 8, 15, 16, 23, 42])
    out = rows(idx)
    assert out.dtype == torch.float16 and torch.equal(out, half[idx])
    assert rows.hit_rate() == 0.0
    labels = torch.arange(N) % 7
    assert torch.equal(DeviceFeatures(labels, CPU, 3 * 8, torch.arange(N))(idx), labels[idx])


def test_a_gather_reads_back_once_from_a_partial_cache_and_never_from_a_whole_copy(x):
    """On a GPU each read-back stalls the host (counted on the CPU by `ReadBacks`, the cache
    and the ids marked as on the device): a partial cache reads back the ids it gathers from
    the host, in one copy, whatever the mix of hits and misses; a whole copy reads nothing."""
    degree = torch.arange(N)
    partial = DeviceFeatures(x, CPU, 10 * row_bytes(x), degree)
    whole = DeviceFeatures(x, CPU, N * row_bytes(x))
    counter = ReadBacks(CPU)
    counter.on_device(partial.cache, partial.slot, whole.cache)
    for rows, idx, expected in (
        (whole, torch.tensor([3, 99, 3]), {}),
        (partial, torch.tensor([95, 5, 99, 0, 91, 5]), {"cpu()": 1}),  # hits and misses
        (partial, torch.tensor([99, 98]), {"cpu()": 1}),  # all hits
        (partial, torch.tensor([1, 2]), {"cpu()": 1}),  # all misses
    ):
        ids = idx.clone()
        counter.on_device(ids)  # a GPU sampler's output
        with counter.stage() as found, counter:
            out = rows(ids)
        assert found == expected and torch.equal(out, x[idx])


MASKS = [f"{split}_mask" for split in "abc"]


def _gathered(x: torch.Tensor, held: list[str], **more: torch.Tensor):
    """A graph with `x`, `y`, three split masks and `more`; the rows a `LocalGather` with `x`
    and `held` on the "device" gathers for a GPU sample's ids, and the read-backs it made."""
    from torch_geometric.data import Data
    from torch_geometric.sampler import SamplerOutput

    from app.loader.batch import LocalGather

    masks = {key: torch.arange(N) % 3 == i for i, key in enumerate(MASKS)}
    data = Data(x=x, y=torch.arange(N) % 5, edge_index=torch.zeros(2, 0, dtype=torch.long),
                num_nodes=N, **masks, **more)  # fmt: skip
    features = {"x": DeviceFeatures(x, CPU, 1 << 40)}
    features.update({k: DeviceFeatures(data[k], CPU, 1 << 62) for k in held})
    node = torch.tensor([5, 0, 77, 5])
    empty = torch.zeros(0, dtype=torch.long)
    counter = ReadBacks(CPU)
    counter.on_device(node, *(f.cache for f in features.values()))
    with counter:
        nodes, edges = LocalGather(data, features)(SamplerOutput(node, empty, empty, empty))
    assert edges == {}
    for key in ("x", "y", *MASKS, *more):
        assert torch.equal(nodes[key], data[key][node]), key
    return data, counter.counts


def test_host_held_attributes_read_a_gpu_samples_ids_back_once_for_all(x):
    """Split masks kept on the host: the batch's ids come back once for all of them (not once
    per attribute), and the gathered rows are the graph's."""
    assert _gathered(x, ["y"])[1] == {"cpu()": 1}


def test_a_job_sampling_on_its_device_holds_narrow_attributes_and_reads_no_ids_back(x):
    """`whole_attrs`: labels and every node attribute of at most 8 bytes per node (masks,
    times) are held whole where the batches are built; wider ones stay on the host. With
    them held, a gather from a whole copy of `x` reads nothing back."""
    from app.loader.batch import whole_attrs

    held = ["y", "time", *MASKS]
    data, counts = _gathered(x, held, time=torch.arange(N, dtype=torch.float64))
    assert sorted(whole_attrs(data)) == sorted(held) and counts == {}
    data.wide = torch.ones(N, 3)  # 12 bytes a node: gathered on the host
    assert "wide" not in whole_attrs(data)


def test_bad_budgets_are_refused(x):
    with pytest.raises(ValueError, match="feature budget must be >= 0 bytes"):
        DeviceFeatures(x, CPU, -1)
    with pytest.raises(ValueError, match="a partial cache of 100 rows needs a degree"):
        DeviceFeatures(x, CPU, row_bytes(x))
    assert auto_budget(CPU) > 1 << 40  # the host: no device limit


def test_hit_rate_is_logged_for_a_partial_cache_only(x, caplog):
    with caplog.at_level(logging.INFO, logger="distgnn.train"):
        DeviceFeatures(x, CPU, N * row_bytes(x)).log_hit_rate("whole")
        part = DeviceFeatures(x, CPU, 10 * row_bytes(x), torch.arange(N))
        part(torch.tensor([99, 0]))
        part.log_hit_rate("epoch 0: x cache")
    assert [r.getMessage() for r in caplog.records] == [
        "epoch 0: x cache: 10 of 100 rows on cpu, hit rate 0.500"
    ]


def test_a_job_on_the_torch_sampler_reads_features_through_the_cache(tmp_path, monkeypatch, caplog):
    """LocalSource under DISTGNN_KERNELS=torch: batches carry the graph's rows although only
    50 rows sit in the cache; each epoch logs the hit rate."""
    monkeypatch.setenv(KERNELS_ENV, "torch")
    cfg = Config(output_dir=str(tmp_path))
    cfg.partition.num_parts = 1
    cfg.dataset = DatasetConfig(root=str(tmp_path / "data"), num_nodes=1500, num_features=8)
    cfg.dataset.num_classes = 3
    cfg.model = ModelConfig(hidden_channels=16, num_layers=2, dropout=0.0)
    cfg.sampler.num_neighbors, cfg.loader.batch_size = [5, 5], 32
    cfg.train.gpu_feature_bytes = 50 * 8 * 4
    data = toy_graph()
    source = LocalSource(validate(cfg), data)
    loader = source.node_loader("train", torch.arange(100), None)
    with caplog.at_level(logging.INFO, logger="distgnn.train"):
        batches = list(loader)
    assert loader.sampler.tensors is not None and source._rows["x"].cached_rows == 50
    for batch in batches:
        assert torch.equal(batch.x, data.x[batch.n_id])
        assert torch.equal(batch.y, data.y[batch.n_id])
    assert any("epoch 0: x cache: 50 of 300 rows on cpu, hit rate" in r.getMessage()
               for r in caplog.records)  # fmt: skip
