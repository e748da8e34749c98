"""The torch sampler (`app.sampler.torch_kernel`), the GPU's, proven on CPU tensors: a valid
sample in the numba kernel's layout, the numba kernel's inclusion frequencies, and training."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.sampler import NodeSamplerInput

from app.config import KERNELS_ENV, Config, ConfigError, ModelConfig, validate
from app.loader import NeighborLoader
from app.model.registry import build_model
from app.sampler import kernel as numba_kernel
from app.sampler import torch_kernel
from app.sampler.csc import to_csc
from app.sampler.neighbor import NeighborSampler
from app.task.node import node_step
from bench.readbacks import ReadBacks
from tests.helpers.samples import check_valid_sample, simple_graph

CPU = torch.device("cpu")
N = 400
Z = 4.5  # per-entry bound: P(|z| > 4.5) ~ 7e-6 under the null, ~1e-3 over every entry tested


@pytest.fixture(scope="module")
def graph():
    data = simple_graph()
    colptr, row, perm = to_csc(data.edge_index, N)
    return data, (colptr, row, perm), torch_kernel.TorchCSC.from_numpy(colptr, row, perm, CPU)


def test_take_all_is_the_numba_sample_exactly(graph):
    """A fan-out at least the largest degree leaves no choice: both kernels give one sample,
    duplicated seeds included (each sampled, a neighbour equal to one mapping to its first)."""
    _, (colptr, row, perm), csc = graph
    seeds = np.array([7, 9, 7, 300, 5, 9])
    for fanouts in ([-1, -1], [40, 40, 40]):
        ref = numba_kernel.neighbor_sample(colptr, row, seeds, fanouts, seed=3, perm=perm)
        got = torch_kernel.neighbor_sample(csc, torch.from_numpy(seeds), fanouts, 3, csc.scratch())
        for a, b in zip(ref[:4], got[:4], strict=True):
            assert np.array_equal(a, b.numpy())
        assert (ref[4], ref[5]) == (got[4], got[5])


def mixed_graph(n: int = 1500, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """(edge_index, in-degrees): degrees 0-4, 20 hubs of 100-600 in-edges, parallel edges and
    self-loops, nodes 0-29 isolated."""
    rng = np.random.default_rng(seed)
    deg = rng.integers(0, 5, n)
    deg[rng.choice(n, 20)] = rng.integers(100, 600, 20)
    deg[:30] = 0
    dst = np.repeat(np.arange(n), deg)
    return np.stack([rng.integers(0, n, dst.size), dst]), deg


def test_take_all_equals_numba_on_mixed_degrees_and_duplicated_seeds():
    """Take-all hops (-1, a fan-out >= the largest degree) and empty ones (0) mixed, isolated
    and hub nodes, parallel edges, duplicated seeds: the numba kernel's sample id for id."""
    ei, deg = mixed_graph()
    n, big = deg.size, int(deg.max())
    colptr, row, perm = to_csc(ei, n)
    csc = torch_kernel.TorchCSC.from_numpy(colptr, row, perm, CPU)
    scratch = csc.scratch()
    rng = np.random.default_rng(0)
    for trial, fanouts in enumerate(([-1], [-1, -1], [0], [big, 0, -1], [-1, big], [0, -1], [])):
        seeds = rng.integers(0, n, 40)
        seeds = np.concatenate([np.arange(3), seeds, seeds[:15]])  # isolated and twice-drawn
        ref = numba_kernel.neighbor_sample(colptr, row, seeds, fanouts, seed=trial, perm=perm)
        got = torch_kernel.neighbor_sample(csc, torch.from_numpy(seeds), fanouts, trial, scratch)
        for a, b in zip(ref[:4], got[:4], strict=True):
            assert np.array_equal(a, b.numpy()), fanouts
        assert (ref[4], ref[5]) == (got[4], got[5]) and bool((scratch == -1).all())


def test_sample_is_valid_on_mixed_degrees():
    ei, deg = mixed_graph()
    ei = np.unique(ei, axis=1)  # no parallel edges: a neighbour drawn twice is then an error
    data = Data(edge_index=torch.from_numpy(ei), num_nodes=deg.size)
    csc = torch_kernel.TorchCSC.from_numpy(*to_csc(ei, deg.size), CPU)
    seeds = torch.tensor([0, 40, 40, *np.flatnonzero(deg > 99)[:5], 41, 0])
    for fanouts, seed in (([10, 5], 0), ([15, 10, 5], 1), ([3, 0, 2], 2), ([1, 1, 1, 1], 3)):
        out = torch_kernel.neighbor_sample(csc, seeds, fanouts, seed, scratch := csc.scratch())
        check_valid_sample(data, seeds, fanouts, out)
        assert bool((scratch == -1).all())


@pytest.mark.parametrize("fanouts, reads", [([10, 5], 3), ([15, 10, 5], 4), ([-1, 0, 3], 2)])
def test_a_sample_reads_sizes_back_once_before_and_once_per_hop_that_draws(graph, fanouts, reads):
    """On a GPU each read-back stalls the host; counted here on the CPU (`ReadBacks` marks the
    CSC and the map as on the device): once before the first hop and once per hop that draws
    an edge (a fan-out of 0 ends the sample), + 1 when the seeds are there too (their range
    check)."""
    _, _, csc = graph
    scratch = csc.scratch()
    seeds = torch.tensor([7, 9, 7, 300, 5, 123, 250, 9, 1, 2])
    counter = ReadBacks(CPU)
    counter.on_device(csc.colptr, csc.row, csc.perm, scratch)
    with counter:
        for seed in range(3):
            torch_kernel.neighbor_sample(csc, seeds, fanouts, seed, scratch)
    assert counter.counts == {"tolist()": 3 * reads}
    device_seeds = seeds.clone()
    counter.on_device(device_seeds)
    with counter.stage() as found, counter:
        torch_kernel.neighbor_sample(csc, device_seeds, fanouts, 0, scratch)
    assert found == {"tolist()": reads + 1}


def test_sample_is_valid_in_the_numba_layout(graph):
    data, _, csc = graph
    seeds = torch.tensor([7, 9, 7, 300, 5, 123, 250, 9])
    for fanouts, seed in (([5, 3], 0), ([10, 5], 1), ([15, 10, 5], 2), ([2, 0, 3], 3)):
        out = torch_kernel.neighbor_sample(csc, seeds, fanouts, seed, scratch := csc.scratch())
        check_valid_sample(data, seeds, fanouts, out)
        assert bool((scratch == -1).all())  # left as found, ready for the next call


def test_bad_seeds_are_refused_in_one_line(graph):
    _, _, csc = graph
    with pytest.raises(ValueError, match=r"seeds holds node ids in \[3, 400\] but the CSC has 400"):
        torch_kernel.neighbor_sample(csc, torch.tensor([3, 400]), [2], 0, csc.scratch())
    with pytest.raises(ValueError, match="seeds must hold integers"):
        torch_kernel.neighbor_sample(csc, torch.tensor([1.0]), [2], 0, csc.scratch())


def test_same_seed_same_sample_other_seed_another(graph):
    _, _, csc = graph
    seeds = torch.arange(20, 60)
    a = torch_kernel.neighbor_sample(csc, seeds, [5, 3], 11, csc.scratch())
    b = torch_kernel.neighbor_sample(csc, seeds, [5, 3], 11, csc.scratch())
    c = torch_kernel.neighbor_sample(csc, seeds, [5, 3], 12, csc.scratch())
    assert all(torch.equal(x, y) for x, y in zip(a[:4], b[:4], strict=True))
    assert not torch.equal(a[0], c[0])


def inclusion_counts(draw, colptr, frontier, k, draws) -> tuple[np.ndarray, dict]:
    """How often each CSC position, and each pair of positions of node `frontier[-1]`, is
    drawn over `draws` seeds."""
    hits = np.zeros(int(colptr[-1]), np.int64)
    pairs: dict = {}
    last = frontier[-1]
    for seed in range(draws):
        epos = draw(frontier, k, seed)
        hits[epos] += 1
        mine = sorted(int(p) for p in epos if colptr[last] <= p < colptr[last + 1])
        for pair in itertools.combinations(mine, 2):
            pairs[pair] = pairs.get(pair, 0) + 1
    return hits, pairs


def test_inclusion_frequencies_match_the_numba_sampler():
    """Over 3000 seeds, every edge of nodes with degree 1..40 is drawn with probability
    min(k, d) / d by both kernels (z-bound per edge against that, and between the kernels), and
    every pair of one node's edges with k(k-1) / (d(d-1)) (a uniform k-subset, not just uniform
    marginals)."""
    degrees, k, draws = [1, 3, 5, 6, 9, 20, 40, 8], 5, 3000
    dst = np.repeat(np.arange(len(degrees)), degrees)
    src = np.concatenate([np.arange(100, 100 + d) for d in degrees])
    colptr, row, perm = to_csc(np.stack([src, dst]), len(degrees))
    csc = torch_kernel.TorchCSC.from_numpy(colptr, row, perm, CPU)
    frontier = np.arange(len(degrees))

    def numba_draw(f, k, seed):
        return numba_kernel.sample_hop(colptr, row, f, k, seed=numba_kernel.hop_seed(seed, 0))[1]

    def torch_draw(f, k, seed):
        return torch_kernel.sample_hop(csc, torch.from_numpy(f), k, seed)[1].numpy()

    ref_hits, ref_pairs = inclusion_counts(numba_draw, colptr, frontier, k, draws)
    hits, pairs = inclusion_counts(torch_draw, colptr, frontier, k, draws)
    deg = np.repeat(degrees, degrees)
    p = np.minimum(k, deg) / deg
    sd = np.sqrt(np.maximum(draws * p * (1 - p), 1e-12))
    for name, h in (("numba", ref_hits), ("torch", hits)):
        z = np.abs(h - draws * p) / sd
        assert z.max() < Z or np.all(p == 1), (name, z.max())
        assert np.array_equal(h[p == 1], np.full((p == 1).sum(), draws))
    both = np.abs(hits - ref_hits) / (np.sqrt(2) * sd)
    assert both.max() < Z, both.max()
    d = degrees[-1]
    q = k * (k - 1) / (d * (d - 1))
    sd_pair = math.sqrt(draws * q * (1 - q))
    assert len(pairs) == d * (d - 1) // 2
    for pair, count in pairs.items():
        assert abs(count - draws * q) / sd_pair < Z, (pair, count)
        assert abs(count - ref_pairs.get(pair, 0)) / (math.sqrt(2) * sd_pair) < Z, pair


def test_sampler_dispatch_follows_the_device_and_the_kernels_switch(graph, monkeypatch):
    data = graph[0]
    assert NeighborSampler(data, [5, 3]).tensors is None  # host CSC: numba
    monkeypatch.setenv(KERNELS_ENV, "torch")
    sampler = NeighborSampler(data, [5, 3])
    assert sampler.tensors is not None
    seeds = torch.tensor([1, 2, 3, 300])
    out = sampler.sample_from_nodes(NodeSamplerInput(None, seeds), seed=4)
    check_valid_sample(
        data, seeds, [5, 3],
        (out.node, out.row, out.col, out.edge, out.num_sampled_nodes, out.num_sampled_edges),
    )  # fmt: skip
    assert NeighborSampler(data, [5, 3], disjoint=True).tensors is None  # numba keeps those
    with pytest.raises(ValueError, match="disjoint/temporal/induced sampling needs sampler.de"):
        NeighborSampler(data, [5, 3], disjoint=True, device="cuda")


def test_a_training_step_runs_on_the_torch_sampler(graph, monkeypatch):
    monkeypatch.setenv(KERNELS_ENV, "torch")
    data = graph[0]
    loader = NeighborLoader(data, [10, 5], input_nodes=torch.arange(N), batch_size=64, shuffle=True)
    assert loader.sampler.tensors is not None
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden_channels=16, num_layers=2, dropout=0.0), 8, 3)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    before = [p.detach().clone() for p in model.parameters()]
    for batch in itertools.islice(loader, 3):
        assert torch.equal(batch.x, data.x[batch.n_id]) and batch.batch_size == 64
        opt.zero_grad()
        res = node_step(model, batch)
        res.loss.backward()
        opt.step()
        assert math.isfinite(float(res.loss.detach())) and res.edges == batch.edge_index.size(1)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_threads_on_the_torch_sampler_give_the_batches_of_one_thread(graph, monkeypatch, caplog):
    """Sampling threads (on CUDA: a stream each) yield the batches of the trainer's thread, in
    order, and a cache's hits counted in several threads add up."""
    from app.loader.device_features import DeviceFeatures

    monkeypatch.setenv(KERNELS_ENV, "torch")
    data = graph[0]
    degree = torch.bincount(data.edge_index[0], minlength=N)

    def batches(threads):
        rows = {"x": DeviceFeatures(data.x, CPU, 100 * data.x[:1].numel() * 4, degree)}
        loader = NeighborLoader(data, [5, 3], input_nodes=torch.arange(N), batch_size=32,
                                shuffle=True, threads=threads, features=rows)  # fmt: skip
        assert loader.streams is not None
        caplog.clear()
        with caplog.at_level("INFO", logger="distgnn.train"):
            out = [(b.n_id, b.edge_index, b.x) for b in loader]
        return out, float(caplog.messages[-1].rsplit("hit rate ", 1)[1])  # logged per epoch

    (one, rate1), (three, rate3) = batches(0), batches(3)
    assert len(one) == len(three) == N // 32 + 1
    for a, b in zip(one, three, strict=True):
        assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))
    assert 0 < rate1 == rate3 < 1


def test_sampler_device_cuda_is_refused_where_it_cannot_serve():
    cfg = Config()
    cfg.sampler.num_neighbors, cfg.sampler.device = [5, 5, 5], "cuda"
    with pytest.raises(ConfigError, match="sampler.device='cuda': samples on the trainer's GPU"):
        validate(cfg)
    cfg.train.device, cfg.cluster.num_nodes, cfg.partition.num_parts = "auto", 2, 2
    with pytest.raises(ConfigError, match=r"serves one-process jobs \(cluster.num_nodes=2"):
        validate(cfg)
    cfg.cluster.num_nodes, cfg.partition.num_parts = 1, 1
    cfg.train.objective = "link"
    with pytest.raises(ConfigError, match="samples node batches; train.objective=link samples"):
        validate(cfg)
    cfg.train.objective = "node"
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="sampler.device='cuda': CUDA is not available"):
            validate(cfg)
    cfg.sampler.device = "gpu"
    with pytest.raises(ConfigError, match="sampler.device='gpu': expected one of cpu, cuda"):
        validate(cfg)


def test_a_one_process_job_trains_on_the_torch_sampler(tmp_path, monkeypatch):
    """`train_single` end to end with the torch twins (sampler and model kernels) on the CPU;
    `sampler.device=auto` resolves to the CPU on a trainer without a GPU."""
    from app.config import DatasetConfig
    from app.task.local import LocalSource
    from app.train.single import train_single
    from tests.helpers.toy import toy_graph

    monkeypatch.setenv(KERNELS_ENV, "torch")
    cfg = Config(output_dir=str(tmp_path))
    cfg.partition.num_parts = 1
    cfg.dataset = DatasetConfig(root=str(tmp_path / "data"), num_nodes=1500, num_features=16)
    cfg.dataset.num_classes = 5
    cfg.model = ModelConfig(hidden_channels=32, num_layers=2, dropout=0.2)
    cfg.sampler.num_neighbors, cfg.sampler.device = [5, 5], "auto"
    cfg.loader.batch_size, cfg.train.epochs, cfg.train.lr = 64, 2, 0.01
    cfg.mlflow.enabled = False
    validate(cfg)
    assert LocalSource(cfg, toy_graph()).sampler_device() == CPU
    m = train_single(cfg, job_dir=tmp_path / "job")
    assert m["steps"] > 0 and m["val_acc"] > 0.3  # 5 classes: better than chance
