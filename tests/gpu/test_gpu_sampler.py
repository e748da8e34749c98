"""CUDA: the torch sampler, the device features and a one-process job sampling on the GPU.

Run by `make test-gpu` on a machine with CUDA; skipped, with the reason shown, elsewhere. The
CPU tests (tests/unit/test_torch_sampler.py, test_device_features.py) prove the same code on
CPU tensors; these prove it where it is meant to run.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from app.loader.device_features import DeviceFeatures
from app.model import ops
from app.sampler import kernel as numba_kernel
from app.sampler import torch_kernel
from app.sampler.csc import to_csc
from app.sampler.neighbor import NeighborSampler
from app.task.metrics import EpochStats
from bench.readbacks import host_waits
from tests.helpers.jobs import run_app
from tests.helpers.samples import check_valid_sample, simple_graph

CUDA = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="no CUDA device")]
GPU = torch.device("cuda")


@pytest.fixture(autouse=True)
def _device_decides(monkeypatch):
    monkeypatch.delenv(ops.KERNELS_ENV, raising=False)  # CPU: numba, cuda: torch


@pytest.fixture(scope="module")
def graph():
    data = simple_graph()
    colptr, row, perm = to_csc(data.edge_index, data.num_nodes)
    return data, (colptr, row, perm), torch_kernel.TorchCSC.from_numpy(colptr, row, perm, GPU)


def test_gpu_samples_are_valid_and_take_all_equals_numba(graph):
    data, (colptr, row, perm), csc = graph
    seeds = torch.tensor([7, 9, 7, 300, 5, 123, 250, 9])
    for fanouts in ([5, 3], [15, 10, 5]):
        out = torch_kernel.neighbor_sample(csc, seeds, fanouts, 1, scratch := csc.scratch())
        assert out[0].device.type == "cuda"
        check_valid_sample(data, seeds, fanouts, [t.cpu() for t in out[:4]] + list(out[4:]))
        assert bool((scratch == -1).all())
    ref = numba_kernel.neighbor_sample(colptr, row, seeds.numpy(), [-1, -1], seed=2, perm=perm)
    got = torch_kernel.neighbor_sample(csc, seeds, [-1, -1], 2, csc.scratch())
    for a, b in zip(ref[:4], got[:4], strict=True):
        assert np.array_equal(a, b.cpu().numpy())


def test_gpu_inclusion_frequencies_are_min_k_d_over_d():
    degrees, k, draws = [1, 3, 5, 9, 20, 40], 5, 2000
    dst = np.repeat(np.arange(len(degrees)), degrees)
    src = np.concatenate([np.arange(100, 100 + d) for d in degrees])
    csc = torch_kernel.TorchCSC.from_numpy(*to_csc(np.stack([src, dst]), len(degrees)), GPU)
    frontier = torch.arange(len(degrees), device=GPU)
    hits = torch.zeros(len(src), dtype=torch.int64, device=GPU)
    for seed in range(draws):
        hits[torch_kernel.sample_hop(csc, frontier, k, seed)[1]] += 1
    deg = torch.tensor(np.repeat(degrees, degrees), dtype=torch.float64)
    p = deg.clamp(max=k) / deg
    z = (hits.cpu() - draws * p).abs() / (draws * p * (1 - p)).clamp(min=1e-12).sqrt()
    assert float(z[p < 1].max()) < 4.5


def test_gpu_sampler_dispatch_and_device_features(graph):
    data = graph[0]
    sampler = NeighborSampler(data, [5, 3], device="cuda")
    out = sampler.sample(torch.tensor([1, 2, 3]), seed=0)
    assert out.node.device.type == "cuda" and out.edge.device.type == "cuda"
    rows = DeviceFeatures(data.x, GPU, 50 * data.x[:1].numel() * 4, data.edge_index[0].bincount())
    assert rows.host.is_pinned() and not rows.whole
    assert torch.equal(rows(out.node).cpu(), data.x[out.node.cpu()])
    whole = DeviceFeatures(data.x, GPU, 1 << 40)
    assert torch.equal(whole(out.node).cpu(), data.x[out.node.cpu()]) and whole.hit_rate() == 1.0


def test_gpu_batches_built_on_side_streams_equal_the_trainers_thread(graph):
    """Sampling threads, each on its own stream, yield the batches of the trainer's thread."""
    from app.loader import NeighborLoader

    data = graph[0]
    sampler = NeighborSampler(data, [5, 3], device="cuda")
    rows = {"x": DeviceFeatures(data.x, GPU, 1 << 40)}

    def batches(threads):
        loader = NeighborLoader(data, [5, 3], input_nodes=torch.arange(data.num_nodes),
                                batch_size=32, shuffle=True, threads=threads, sampler=sampler,
                                features=rows)  # fmt: skip
        return [(b.n_id.cpu(), b.edge_index.cpu(), (b.x.sum() * 1).cpu()) for b in loader]

    for a, b in zip(batches(0), batches(3), strict=True):
        assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))


def test_step_metrics_are_summed_without_a_host_sync():
    stats = EpochStats()
    loss, correct = torch.tensor(0.5, device=GPU), torch.tensor(3, device=GPU)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            stats.add(loss, correct, 4, 10)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    stats.settle()
    assert (stats.loss_sum, stats.correct, stats.seeds) == (6.0, 9.0, 12.0)


def test_a_gpu_sample_waits_once_per_hop_and_once_more_and_a_gather_at_most_once(graph):
    """The CPU tests count read-backs with `bench.readbacks`; here the device's own count:
    per sample once before the first hop and once per hop that draws an edge (host seeds, as
    the loader passes them; a fan-out of 0 ends the sample), 0 per gather from a whole copy,
    1 from a partial cache (the ids it fetches from the host)."""
    data, _, csc = graph
    scratch = csc.scratch()
    seeds = torch.tensor([7, 9, 7, 300, 5, 123, 250, 9])
    for fanouts, reads in (([5, 3], 3), ([15, 10, 5], 4), ([-1, 0, 3], 2)):
        torch_kernel.neighbor_sample(csc, seeds, fanouts, 0, scratch)  # warm-up
        waits = host_waits(
            lambda f=fanouts: torch_kernel.neighbor_sample(csc, seeds, f, 1, scratch)
        )
        assert waits == reads, (fanouts, waits)
    node = torch_kernel.neighbor_sample(csc, seeds, [5, 3], 2, scratch)[0]
    whole = DeviceFeatures(data.x, GPU, 1 << 40)
    partial = DeviceFeatures(
        data.x, GPU, 50 * data.x[:1].numel() * 4, data.edge_index[0].bincount()
    )
    whole(node), partial(node)  # warm-up
    assert host_waits(lambda: whole(node)) == 0
    assert host_waits(lambda: partial(node)) == 1


def test_a_gpu_training_step_waits_for_the_device_once(graph):
    """Forward, backward and Adam's step of SAGE 3x16 on a GPU-sampled batch: one wait (the
    batch's edge order and every layer's edge count, read together), as counted on the CPU."""
    from app.model.gnn import SampledGNN

    data, _, csc = graph
    fanouts = [5, 3, 2]
    node, row, col, _, nsn, nse = torch_kernel.neighbor_sample(
        csc, torch.arange(32), fanouts, 0, csc.scratch()
    )
    x, edge_index = data.x.to(GPU)[node], torch.stack([row, col])
    torch.manual_seed(0)
    model = SampledGNN("sage", x.size(1), 16, 3, len(fanouts)).to(GPU)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        model(x, edge_index, nsn, nse)[:32].sum().backward()
        opt.step()

    step()  # warm-up: Adam's state, cuSPARSE's handles
    assert host_waits(step) == 1


def final_acc(tmp_path, name, *overrides):
    proc = run_app(
        "+experiment=smoke", f"output_dir={tmp_path}", f"dataset.root={tmp_path}/data",
        "mlflow.enabled=false", f"hydra.run.dir={tmp_path / name}", "train.device=cuda",
        "train.epochs=3", *overrides, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    final = re.search(r"final: .*test_acc=([\d.]+)", proc.stdout + proc.stderr)
    assert final, proc.stdout[-3000:]
    return float(final.group(1)), proc.stdout + proc.stderr


@pytest.mark.dist
def test_a_job_sampling_on_the_gpu_learns_as_one_sampling_on_the_cpu(tmp_path):
    """sampler.device=cuda (CSC and features on the GPU; a 500-row cache of the 2000 16-wide
    float32 rows, forced by the byte budget) reaches the accuracy of the same job fed by the CPU sampler."""
    cpu, _ = final_acc(tmp_path, "cpu-sampler", "sampler.device=cpu")
    gpu, out = final_acc(
        tmp_path, "gpu-sampler", "sampler.device=cuda", f"train.gpu_feature_bytes={500 * 16 * 4}"
    )
    assert gpu >= cpu - 0.05, (cpu, gpu)
    assert "x cache: " in out and "hit rate" in out
