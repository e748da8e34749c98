"""Layer-wise inference in one process (`local_view`): exact, chunk-independent, and equal to
sampled evaluation with full fan-out; plus the fallback warning and the config keys.

The multi-partition cases (real processes, RPC, gloo) are in tests/dist/test_layerwise_dist.py.
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from app.config import ConfigError, compose_config
from app.inference import evaluate_layerwise, layerwise_logits, local_view, supports_layerwise
from app.model.gnn import MLP, SampledGNN
from app.model.hetero import HeteroNodeClassifier, HeteroSAGE, NodeEmbeddings
from tests.unit.test_model import toy_graph, toy_hetero


@torch.no_grad()
def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got - ref).abs().max() / ref.abs().max()) if ref.numel() else 0.0


@pytest.fixture
def graph():
    data = toy_graph(200)
    # a self-loop, a duplicated edge and an isolated node: the awkward cases of normalisation
    extra = torch.tensor([[5, 7, 7], [5, 9, 9]])
    data.edge_index = torch.cat([data.edge_index[:, data.edge_index[1] != 199], extra], 1)
    return data


def model_of(kind: str, data, layers: int = 2) -> nn.Module:
    torch.manual_seed(3)
    if kind == "mlp":
        return MLP(data.x.size(1), 16, 3, layers, dropout=0.5)
    return SampledGNN(kind, data.x.size(1), 16, 3, layers, dropout=0.5, heads=2)


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat", "mlp"])
@pytest.mark.parametrize("layers", [1, 3])
def test_layerwise_equals_full_graph_forward(graph, kind, layers):
    model = model_of(kind, graph, layers).eval()
    ref = model(graph.x, graph.edge_index)
    view = local_view(graph)
    for chunk in (1000, 23):  # one chunk, and several smaller than the node count
        assert rel_err(layerwise_logits(model, view, chunk), ref) < 1e-4


def test_training_mode_is_restored_and_dropout_is_off(graph):
    model = model_of("sage", graph).train()
    out = layerwise_logits(model, local_view(graph), 50)
    assert model.training
    assert rel_err(out, model.eval()(graph.x, graph.edge_index)) < 1e-4


def hetero_model(data, layers: int) -> HeteroNodeClassifier:
    torch.manual_seed(4)
    widths = {"paper": data["paper"].x.size(1), "author": 5}
    gnn = HeteroSAGE(data.metadata(), widths, 16, 3, layers, dropout=0.5)
    return HeteroNodeClassifier(
        gnn, NodeEmbeddings({"author": data["author"].num_nodes}, 5), "paper"
    )


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_hetero_layerwise_equals_full_graph_forward(layers):
    data = toy_hetero()
    model = hetero_model(data, layers).eval()
    ids = {t: torch.arange(data[t].num_nodes) for t in data.node_types}
    x = model.embeddings.fill({"paper": data["paper"].x}, ids)
    ref = model.gnn(x, data.edge_index_dict)["paper"]
    for chunk in (1000, 17):
        assert rel_err(layerwise_logits(model, local_view(data), chunk), ref) < 1e-4


@pytest.mark.parametrize("kind", ["sage", "gat"])
def test_equals_sampled_evaluation_with_full_fanout(graph, kind):
    """With fan-out -1 each seed's sampled tree is its full neighbourhood: same logits.

    (GCN is left out on purpose: sampled GCN normalises by in-degrees inside the batch, which
    are truncated for the last hop's nodes, so only layer-wise GCN is the full-graph one.)
    """
    from app.loader import NeighborLoader

    model = model_of(kind, graph).eval()
    full = layerwise_logits(model, local_view(graph), 64)
    loader = NeighborLoader(graph, [-1, -1], input_nodes=torch.arange(200), batch_size=50)
    for batch in loader:
        out = model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
        seeds = batch.n_id[: batch.batch_size]
        assert rel_err(out[: batch.batch_size], full[seeds]) < 1e-4


def test_evaluate_reports_split_accuracies(graph):
    model = model_of("sage", graph).eval()
    pred = model(graph.x, graph.edge_index).argmax(-1)
    acc = evaluate_layerwise(model, local_view(graph), 37)
    for split in ("val", "test"):
        mask = graph[f"{split}_mask"]
        assert acc[f"{split}_acc"] == pytest.approx(
            float((pred[mask] == graph.y[mask]).float().mean())
        )


def test_model_without_per_layer_forward_falls_back_with_one_warning(caplog):
    class Plain(nn.Module):
        def forward(self, x):
            return x

    with caplog.at_level(logging.WARNING, logger="app.inference.layerwise"):
        assert not supports_layerwise(Plain())
    assert len(caplog.records) == 1 and "Plain" in caplog.records[0].getMessage()
    assert supports_layerwise(model_of("gcn", toy_graph(20)))


def test_bad_chunk_size_is_one_clear_error(graph):
    with pytest.raises(ValueError, match="chunk_size=0"):
        layerwise_logits(model_of("sage", graph), local_view(graph), 0)


def test_config_keys_default_and_validate():
    cfg = compose_config([])
    assert cfg.train.eval_mode == "layerwise" and cfg.train.eval_chunk_size > 0
    with pytest.raises(ConfigError, match="train.eval_mode='exact'"):
        compose_config(["train.eval_mode=exact"])
    with pytest.raises(ConfigError, match="train.eval_chunk_size=0"):
        compose_config(["train.eval_chunk_size=0"])


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_link_scores_from_layerwise_embeddings(graph, decoder):
    from app.inference import layerwise_link_scores
    from app.model.link import Decoder, LinkPredictor

    torch.manual_seed(5)
    model = LinkPredictor(SampledGNN("sage", graph.x.size(1), 16, 16, 2), Decoder(decoder, 16))
    model.eval()
    z = model.encoder(graph.x, graph.edge_index)
    pairs = torch.randint(0, 200, (2, 50))
    del graph.y, graph.val_mask  # a link graph needs no labels
    got = layerwise_link_scores(model, local_view(graph), 64, pairs)
    assert rel_err(got, model.score(z[pairs[0]], z[pairs[1]])) < 1e-4
