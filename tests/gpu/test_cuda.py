"""CUDA: models, layer-wise inference and whole jobs on a GPU equal (or match) the CPU.

Run by `make test-gpu` on a machine with CUDA; skipped, with the reason shown, elsewhere.
Each GPU result is compared with the CPU path (numba kernels) on the same inputs.
"""

from __future__ import annotations

import re

import pytest
import torch

from app.inference import evaluate_layerwise, layerwise_link_scores, layerwise_logits, local_view
from app.model import ops
from app.model.gnn import SampledGNN
from app.model.link import Decoder, LinkPredictor
from tests.helpers.jobs import run_app
from tests.helpers.model_cases import (
    LAYERWISE_KINDS,
    hetero_case,
    layerwise_case,
    model_of,
    sampled_batch,
)
from tests.helpers.toy import toy_graph

CUDA = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="no CUDA device")]
TOL = dict(atol=1e-4, rtol=1e-4)


@pytest.fixture(autouse=True)
def _device_decides(monkeypatch):
    monkeypatch.delenv(ops.KERNELS_ENV, raising=False)  # CPU: numba, cuda: torch


def on(device, value):
    if isinstance(value, dict):
        return {k: on(device, v) for k, v in value.items()}
    return value.to(device) if isinstance(value, torch.Tensor) else value


def grads(model, run, device):
    """(output, parameter gradients) of `run(model)` on `device`, in host memory."""
    model = model.to(device)
    model.zero_grad()
    out = run(model)
    (out * torch.linspace(-1, 1, out.numel(), device=device).view(out.shape)).sum().backward()
    found = [out.detach()] + [p.grad for p in model.parameters() if p.grad is not None]
    return [t.cpu().clone() for t in found]  # copies: moving the model moves its grads


def assert_same(a, b):
    assert len(a) == len(b) > 1
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, **TOL)


@pytest.mark.parametrize("name", ["sage", "gcn", "gat", "mlp"])
@pytest.mark.parametrize("hidden", [4, 32])
def test_models_train_on_cuda_as_on_cpu(name, hidden):
    batch = sampled_batch()
    torch.manual_seed(0)
    model = model_of(name, batch.x.size(1), hidden).train()
    counts = (batch.num_sampled_nodes, batch.num_sampled_edges)

    def run(device):
        x, ei = batch.x.to(device), batch.edge_index.to(device)
        return grads(model, lambda m: m(x, ei, *counts)[: batch.batch_size], device)

    assert_same(run("cpu"), run("cuda"))


def test_hetero_sage_trains_on_cuda_as_on_cpu():
    data, model, x = hetero_case()

    def run(device):
        xs, eis = on(device, x), on(device, data.edge_index_dict)
        return grads(model.train(), lambda m: m(xs, eis)["paper"], device)

    assert_same(run("cpu"), run("cuda"))


def test_dropout_on_cuda_is_unbiased():
    x = torch.ones(200_000, device="cuda")
    a = ops.dropout(x, 0.5, True)
    assert a.is_cuda and abs(float((a == 0).float().mean()) - 0.5) < 0.01
    assert abs(float(a.mean()) - 1.0) < 0.02


@pytest.mark.parametrize("kind", LAYERWISE_KINDS)
@pytest.mark.parametrize("keep", [False, True])
def test_layerwise_on_cuda_equals_cpu(kind, keep):
    data, model = layerwise_case(kind)
    view = local_view(data)
    want = layerwise_logits(model, view, 37)
    gpu = model.to("cuda")
    if kind == "hetero":
        gpu.embeddings.to("cuda")
    for _ in range(2):  # kept buffers serve the second pass
        torch.testing.assert_close(layerwise_logits(gpu, view, 37, keep), want, **TOL)
    if kind not in ("hetero", "link"):
        assert evaluate_layerwise(gpu, view, 37, keep_buffers=keep) == pytest.approx(
            evaluate_layerwise(model.cpu(), view, 37)
        )


def test_one_process_layerwise_on_cuda_keeps_its_tables_there():
    """One process on a GPU with room: the kept buffers (the layer tables) and the inputs are
    on the GPU, no page-locked host buffer is made, and the logits still equal the CPU's."""
    data, model = layerwise_case("sage")
    view = local_view(data)
    want = layerwise_logits(model, view, 37)
    got = layerwise_logits(model.to("cuda"), view, 37, True)
    torch.testing.assert_close(got, want, **TOL)
    gpu = torch.device("cuda", torch.cuda.current_device())
    kept = view.cache[f"buffers/{gpu}"]
    bufs = [b for bs in kept.free.values() for b in bs]
    assert bufs and all(b.is_cuda for b in bufs) and "buffers/cpu" not in view.cache
    x = view.cache[f"inputs/{gpu}"]["_N"]  # copied once, read in place by the next pass
    assert x.is_cuda and torch.equal(x.cpu(), data.x.float())
    torch.testing.assert_close(layerwise_logits(model, view, 37, True), want, **TOL)
    assert view.cache[f"inputs/{gpu}"]["_N"] is x


def test_layerwise_link_scores_on_cuda():
    data = toy_graph(200)
    torch.manual_seed(3)
    model = LinkPredictor(SampledGNN("sage", data.x.size(1), 16, 16, 2), Decoder("mlp", 16))
    pairs = data.edge_index[:, :50]
    want = layerwise_link_scores(model, local_view(data), 64, pairs)
    got = layerwise_link_scores(model.to("cuda"), local_view(data), 64, pairs)
    torch.testing.assert_close(got.cpu(), want, **TOL)


def job(tmp_path, name, *overrides):
    """(the final test accuracy, the process) of a smoke job (the summary's `final:` line:
    a one-trainer job runs in the launcher's process and writes no result.json)."""
    proc = run_app(
        "+experiment=smoke", f"output_dir={tmp_path}", f"dataset.root={tmp_path}/data",
        "mlflow.enabled=false", f"hydra.run.dir={tmp_path / name}", *overrides, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    final = re.search(r"final: .*test_acc=([\d.]+)", proc.stdout + proc.stderr)
    assert final, proc.stdout[-3000:]
    return float(final.group(1)), proc


@pytest.mark.dist
@pytest.mark.parametrize("nodes", [1, 2])
def test_job_on_gpu_learns_as_on_cpu(tmp_path, nodes):
    """A 1-node job, and a 2-node job whose trainers share this machine's GPU(s) round-robin
    (with sampler processes; each trainer holds its partition's rows on its GPU and fills its
    batches there), reach the CPU job's accuracy."""
    more = [f"cluster.num_nodes={nodes}", "train.epochs=3", "loader.num_workers=1"]
    cpu, _ = job(tmp_path, "cpu", *more, "train.device=cpu")
    gpu, proc = job(tmp_path, "gpu", *more, "train.device=cuda")
    assert gpu >= cpu - 0.05, (cpu, gpu)
    if nodes == 2:
        out = proc.stdout + proc.stderr
        held = re.findall(r"resident rows after epoch \d+: \d+ on cuda:\d, hit rate ([\d.]+)", out)
        assert held and all(float(r) > 0.3 for r in held), out[-3000:]
    if nodes > torch.cuda.device_count():
        assert "share 1 GPU(s) round-robin" in proc.stderr + proc.stdout
