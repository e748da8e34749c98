"""CUDA: models, layer-wise inference and whole jobs on a GPU equal (or match) the CPU.

Run by `make test-gpu` on a machine with CUDA; skipped, with the reason shown, elsewhere.
Each GPU result is compared with the CPU path (numba kernels) on the same inputs.
"""

from __future__ import annotations

import re

import pytest
import torch

from app.config import ModelConfig
from app.inference import evaluate_layerwise, layerwise_link_scores, layerwise_logits, local_view
from app.model import ops
from app.model.gnn import SampledGNN, build_model
from app.model.hetero import HeteroNodeClassifier, HeteroSAGE, NodeEmbeddings
from app.model.link import Decoder, LinkPredictor
from tests.conftest import run_app
from tests.unit.test_model import ToyLoader, toy_graph, toy_hetero

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
    data = toy_graph(num_nodes=400, seed=1)
    batch = next(iter(ToyLoader(data, [4, 3], torch.arange(64), batch_size=32, seed=0)))
    torch.manual_seed(0)
    cfg = ModelConfig(name=name, hidden_channels=hidden, num_layers=2, dropout=0.0, heads=2)
    model = build_model(cfg, batch.x.size(1), 3).train()
    counts = (batch.num_sampled_nodes, batch.num_sampled_edges)

    def run(device):
        x, ei = batch.x.to(device), batch.edge_index.to(device)
        return grads(model, lambda m: m(x, ei, *counts)[: batch.batch_size], device)

    assert_same(run("cpu"), run("cuda"))


def test_hetero_sage_trains_on_cuda_as_on_cpu():
    data = toy_hetero()
    torch.manual_seed(4)
    widths = {"paper": data["paper"].x.size(1), "author": 5}
    model = HeteroSAGE(data.metadata(), widths, 16, 3, 2).train()
    ids = {t: torch.arange(data[t].num_nodes) for t in data.node_types}
    x = NodeEmbeddings({"author": data["author"].num_nodes}, 5).fill(
        {"paper": data["paper"].x}, ids
    )
    x = {t: v.detach() for t, v in x.items()}

    def run(device):
        xs, eis = on(device, x), on(device, data.edge_index_dict)
        return grads(model, lambda m: m(xs, eis)["paper"], device)

    assert_same(run("cpu"), run("cuda"))


def test_dropout_on_cuda_is_unbiased():
    x = torch.ones(200_000, device="cuda")
    a = ops.dropout(x, 0.5, True)
    assert a.is_cuda and abs(float((a == 0).float().mean()) - 0.5) < 0.01
    assert abs(float(a.mean()) - 1.0) < 0.02


def layerwise_model(kind: str):
    torch.manual_seed(3)
    if kind == "hetero":
        data = toy_hetero()
        widths = {"paper": data["paper"].x.size(1), "author": 5}
        gnn = HeteroSAGE(data.metadata(), widths, 16, 3, 2)
        emb = NodeEmbeddings({"author": data["author"].num_nodes}, 5)
        return data, HeteroNodeClassifier(gnn, emb, "paper")
    data = toy_graph(200)
    if kind == "narrow":  # every layer narrows: the pass reads projections
        return data, SampledGNN("sage", data.x.size(1), 4, 3, 3)
    cfg = ModelConfig(name=kind, hidden_channels=16, num_layers=2, heads=2)
    return data, build_model(cfg, data.x.size(1), 3)


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat", "mlp", "narrow", "hetero"])
@pytest.mark.parametrize("keep", [False, True])
def test_layerwise_on_cuda_equals_cpu(kind, keep):
    data, model = layerwise_model(kind)
    view = local_view(data)
    want = layerwise_logits(model, view, 37)
    gpu = model.to("cuda")
    if kind == "hetero":
        gpu.embeddings.to("cuda")
    for _ in range(2):  # kept buffers serve the second pass
        torch.testing.assert_close(layerwise_logits(gpu, view, 37, keep), want, **TOL)
    if kind != "hetero":
        assert evaluate_layerwise(gpu, view, 37, keep_buffers=keep) == pytest.approx(
            evaluate_layerwise(model.cpu(), view, 37)
        )


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


@pytest.mark.parametrize("nodes", [1, 2])
def test_job_on_gpu_learns_as_on_cpu(tmp_path, nodes):
    """A 1-node job, and a 2-node job whose trainers share this machine's GPU(s) round-robin
    (with sampler processes), reach the CPU job's accuracy."""
    more = [f"cluster.num_nodes={nodes}", "train.epochs=3", "loader.num_workers=1"]
    cpu, _ = job(tmp_path, "cpu", *more, "train.device=cpu")
    gpu, proc = job(tmp_path, "gpu", *more, "train.device=cuda")
    assert gpu >= cpu - 0.05, (cpu, gpu)
    if nodes > torch.cuda.device_count():
        assert "share 1 GPU(s) round-robin" in proc.stderr + proc.stdout
