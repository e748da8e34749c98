"""The models and inputs the kernels' two paths (numba, torch) and CUDA are compared on: a
sampled batch, each homogeneous model, a hetero SAGE, and each shape layer-wise inference takes.
"""

from __future__ import annotations

import torch

from app.config import ModelConfig
from app.model.gnn import SampledGNN
from app.model.hetero import HeteroNodeClassifier, HeteroSAGE, NodeEmbeddings
from app.model.link import Decoder, LinkPredictor
from app.model.registry import build_model
from tests.helpers.toy import ToyLoader, toy_graph, toy_hetero


def sampled_batch():
    """A hop-ordered batch of a toy graph (two hops, 32 seeds)."""
    data = toy_graph(num_nodes=400, seed=1)
    return next(iter(ToyLoader(data, [4, 3], torch.arange(64), batch_size=32, seed=0)))


def model_of(name: str, width: int, hidden: int = 16, out: int = 3):
    cfg = ModelConfig(name=name, hidden_channels=hidden, num_layers=2, dropout=0.0, heads=2)
    return build_model(cfg, width, out)


def hetero_case():
    """(toy hetero graph, a 2-layer HeteroSAGE, its inputs with embedding rows)."""
    data = toy_hetero()
    torch.manual_seed(4)
    widths = {"paper": data["paper"].x.size(1), "author": 5}
    model = HeteroSAGE(data.metadata(), widths, 16, 3, 2)
    ids = {t: torch.arange(data[t].num_nodes) for t in data.node_types}
    emb = NodeEmbeddings({"author": data["author"].num_nodes}, 5)
    x = emb.fill({"paper": data["paper"].x}, ids)
    return data, model, {t: v.detach() for t, v in x.items()}


def layerwise_case(kind: str):
    """(graph, model) of each shape layer-wise inference takes: every homogeneous model, one
    whose every layer narrows (it reads projections), a hetero classifier, a link encoder."""
    torch.manual_seed(3)
    if kind == "hetero":
        data, gnn, _ = hetero_case()
        emb = NodeEmbeddings({"author": data["author"].num_nodes}, 5)
        return data, HeteroNodeClassifier(gnn, emb, "paper")
    data = toy_graph(200)
    if kind == "link":
        return data, LinkPredictor(
            SampledGNN("sage", data.x.size(1), 16, 16, 2), Decoder("dot", 16)
        )
    if kind == "narrow":
        return data, SampledGNN("sage", data.x.size(1), 4, 3, 3)
    return data, model_of(kind, data.x.size(1))


LAYERWISE_KINDS = ["sage", "gcn", "gat", "mlp", "narrow", "hetero", "link"]
