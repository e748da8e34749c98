"""`model.name` → its builder: a new model is its module, its YAML (`conf/model/NAME.yaml`)
and one line in `MODELS`.

A builder is `(cfg: ModelConfig, in_channels, out_channels) -> nn.Module`, named as a
`module:attr` string (`app.entrypoint`) so `app.config` reads the names here without importing
the models (which import the config).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.entrypoint import resolve

if TYPE_CHECKING:
    from torch import nn

    from app.config import ModelConfig

MODELS: dict[str, str] = {
    "sage": "app.model.gnn:SampledGNN.from_config",
    "gat": "app.model.gnn:SampledGNN.from_config",
    "gcn": "app.model.gnn:SampledGNN.from_config",
    "mlp": "app.model.gnn:MLP.from_config",
}


def build_model(cfg: ModelConfig, in_channels: int, out_channels: int) -> nn.Module:
    """The homogeneous model named by `cfg.name` (one of `MODELS`)."""
    if in_channels <= 0 or out_channels <= 0:
        raise ValueError(f"in_channels={in_channels}, out_channels={out_channels}: must be > 0")
    if cfg.name not in MODELS:
        raise ValueError(f"model.name={cfg.name!r}: expected one of {', '.join(MODELS)}")
    return resolve(MODELS[cfg.name])(cfg, in_channels, out_channels)
