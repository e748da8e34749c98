"""The typed seams: registries as the name lists, the layer-wise protocols, `SamplerOptions`.

A new model is its module, its YAML and one `MODELS` line: config validation and the builder
both read the registry, so nothing else lists the names.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import Tensor, nn

from app.config import ConfigError, SamplerConfig, compose_config, validate
from app.distributed.sampler import SamplerOptions
from app.entrypoint import resolve
from app.inference.layerwise import layerwise_net, supports_layerwise
from app.model.gnn import MLP, SampledGNN
from app.model.hetero import HeteroSAGE, NodeEmbeddings
from app.model.layerwise import HeteroLayerwiseModel, LayerwiseModel, LayerwiseWrapper
from app.model.link import Decoder, HeteroLinkPredictor, LinkPredictor
from app.model.registry import MODELS, build_model
from app.task.registry import OBJECTIVES


class Tiny(nn.Module):
    """A model a user adds: one linear layer, built from `ModelConfig`."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.lin = nn.Linear(cin, cout)

    @classmethod
    def from_config(cls, cfg, in_channels: int, out_channels: int) -> Tiny:
        return cls(in_channels, out_channels)

    def forward(self, x: Tensor, *_: object) -> Tensor:
        return self.lin(x)


def test_a_new_model_is_one_registry_line(monkeypatch):
    cfg = compose_config([])
    cfg.model.name = "tiny"
    with pytest.raises(ConfigError, match="model.name='tiny'"):
        validate(cfg)
    monkeypatch.setitem(MODELS, "tiny", f"{__name__}:Tiny.from_config")
    validate(cfg)  # the config's check reads the registry: no second list to edit
    model = build_model(cfg.model, 5, 3)
    assert isinstance(model, Tiny) and model(torch.ones(2, 5)).shape == (2, 3)
    assert not supports_layerwise(model)  # no per-layer API: sampled evaluation instead


def test_every_registry_entry_resolves():
    for entry in (*MODELS.values(), *OBJECTIVES.values()):
        assert callable(resolve(entry)), entry
    assert compose_config(["train.objective=link"]).train.objective in OBJECTIVES
    with pytest.raises(ConfigError, match="train.objective='edge'"):
        compose_config(["train.objective=edge"])


def test_a_malformed_entry_point_is_one_clear_error():
    with pytest.raises(ValueError, match="entry point 'app.model.gnn': expected"):
        resolve("app.model.gnn")


def _hetero_gnn() -> HeteroSAGE:
    meta = (["a", "b"], [("a", "to", "b"), ("b", "rev_to", "a")])
    return HeteroSAGE(meta, {"a": 4, "b": 4}, 8, 3, 2)


def test_the_models_satisfy_the_layerwise_protocols():
    for name in ("sage", "gcn", "gat"):
        assert isinstance(SampledGNN(name, 4, 8, 3, 2), LayerwiseModel)
    assert isinstance(MLP(4, 8, 3, 2), LayerwiseModel)
    hetero = _hetero_gnn()
    assert isinstance(hetero, HeteroLayerwiseModel) and not isinstance(hetero, LayerwiseModel)
    link = LinkPredictor(SampledGNN("sage", 4, 8, 8, 2), Decoder("dot", 8))
    emb = NodeEmbeddings({"b": 10}, 4)
    hlink = HeteroLinkPredictor(hetero, emb, ("a", "to", "b"), Decoder("dot", 3))
    for wrapper in (link, hlink):
        assert isinstance(wrapper, LayerwiseWrapper)
    assert layerwise_net(link) == (link.encoder, {})
    net, rows = layerwise_net(hlink)
    assert net is hetero and rows.keys() == {"b"} and rows["b"] is emb.tables["b"].weight


def test_a_network_missing_one_method_is_not_layerwise():
    class NoProjection(SampledGNN):
        inference_projection = None  # type: ignore[assignment]

    net = NoProjection("sage", 4, 8, 3, 2)
    assert not isinstance(net, LayerwiseModel)
    assert layerwise_net(net)[0] is None


def test_sampler_options_from_config_are_frozen_and_keyed():
    s = SamplerConfig(num_neighbors=[5, 3], replace=True, time_attr="time")
    options = SamplerOptions.from_config(s)
    assert options.num_neighbors == (5, 3) and options.fanouts() == [5, 3]
    assert options.replace and options.time_attr == "time"
    assert options.feature_cache_size == s.feature_cache_size
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.replace = False  # type: ignore[misc]
    assert SamplerOptions(**options.as_kwargs()) == options
    assert SamplerOptions(**options.as_kwargs()).key() == options.key()


def test_sampler_options_take_pyg_edge_type_keys():
    by_string = SamplerOptions({"a__to__b": [2, 1]})
    by_tuple = SamplerOptions({("a", "to", "b"): [2, 1]})
    assert by_string == by_tuple
    assert by_string.fanouts() == {("a", "to", "b"): [2, 1]}
