"""A GPU-like training step for `bench.hosts`'s gpuspeed regime: `model.name=bench.gpu_step:build`.

The model holds the configured model's parameters (so DDP all-reduces the real gradient
bytes every step) but replaces its compute by a fixed wall time: a training forward sleeps
`DISTGNN_BENCH_STEP_S` seconds (set by the bench, inherited by the job's trainers), then runs
the real layers on a few seed rows without edges, so every parameter gets a gradient. The
sleep holds no CPU and no GIL, like a trainer waiting for its GPU, so the sampling threads
and RPC get the cores they would get beside a GPU step; the step's length does not depend on
this machine's load. Evaluation (not training) does not sleep.

The logits are meaningless (every seed gets the same row): the bench times epochs and counts
bytes with it, never accuracy.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence

from torch import Tensor, nn

from app.config import ModelConfig
from app.model.registry import build_model

STEP_ENV = "DISTGNN_BENCH_STEP_S"
ROWS = 8  # seed rows the real layers run on: a gradient for every parameter, little CPU


class FixedStep(nn.Module):
    """`inner`'s parameters, a training forward of `step_s` seconds (see the module doc)."""

    def __init__(self, inner: nn.Module, step_s: float) -> None:
        super().__init__()
        if step_s < 0:
            raise ValueError(f"{STEP_ENV}={step_s}: pass a step time in seconds >= 0")
        self.inner, self.step_s = inner, step_s

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        num_sampled_nodes: Sequence[int] | None = None,
        num_sampled_edges: Sequence[int] | None = None,
    ) -> Tensor:
        if self.training:
            time.sleep(self.step_s)
        rows = x.size(0) if num_sampled_nodes is None else int(num_sampled_nodes[0])
        out = self.inner(x[:ROWS], edge_index[:, :0])  # the model's contract: `rows` rows
        return out.mean(0, keepdim=True).expand(rows, -1)


def build(cfg: ModelConfig, in_channels: int, out_channels: int) -> FixedStep:
    """The builder `model.name=bench.gpu_step:build` names: GraphSAGE of `cfg`'s shape with
    the step time of `DISTGNN_BENCH_STEP_S`."""
    raw = os.environ.get(STEP_ENV)
    if raw is None:
        raise ValueError(f"model.name=bench.gpu_step:build needs {STEP_ENV} (seconds per step)")
    inner = build_model(dataclasses.replace(cfg, name="sage"), in_channels, out_channels)
    return FixedStep(inner, float(raw))
