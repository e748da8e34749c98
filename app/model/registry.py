"""`model.name` → its builder: a new model is its module, its YAML (`conf/model/NAME.yaml`)
and one line in `MODELS`.

A builder is `(cfg: ModelConfig, in_channels, out_channels) -> nn.Module`, named as a
`module:attr` string (`app.entrypoint`) so `app.config` reads the names here without importing
the models (which import the config). A `model.name` that is itself such a string
(`package.module:builder`) names a builder of your own, importable by the job's processes
(`bench.hosts` trains `bench.gpu_step:build` this way).
"""

from __future__ import annotations

import re
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

BUILDER = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")  # package.module:attr


def is_builder(name: str) -> bool:
    """Whether `name` names a builder of your own (`package.module:attr`), not one of MODELS."""
    return BUILDER.fullmatch(name) is not None


def build_model(cfg: ModelConfig, in_channels: int, out_channels: int) -> nn.Module:
    """The homogeneous model named by `cfg.name` (one of `MODELS`, or a builder's entry)."""
    if in_channels <= 0 or out_channels <= 0:
        raise ValueError(f"in_channels={in_channels}, out_channels={out_channels}: must be > 0")
    if cfg.name not in MODELS and not is_builder(cfg.name):
        raise ValueError(f"model.name={cfg.name!r}: expected one of {', '.join(MODELS)}")
    return resolve(MODELS.get(cfg.name, cfg.name))(cfg, in_channels, out_channels)
