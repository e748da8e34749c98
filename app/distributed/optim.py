"""Sparse optimizers for `DistEmbedding`: `SparseAdagrad` and `SparseAdam` (DGL parity).

A step touches only the rows looked up since the previous step: the trainer sums each row's
gradient, sends it to the row's owner, and the owner updates the row and its optimizer state
(kept beside its shard). The update rules match `torch.optim.Adagrad` on sparse gradients and
`torch.optim.SparseAdam`, so a single-process dense reference gives the same numbers.
"""

from __future__ import annotations

import math

import torch

from app.distributed.embedding import DistEmbedding
from app.distributed.tensor import DistTensor


def _state(t: DistTensor, key: str) -> torch.Tensor:
    if not hasattr(t, "opt_state"):
        t.opt_state = {}
    if key not in t.opt_state:
        t.opt_state[key] = torch.zeros_like(t.local)
    return t.opt_state[key]


# Rows are unique (the embedding sums duplicates first), so each state tensor is gathered once
# and written back once with index_copy_.


def adagrad_update(t: DistTensor, rows: torch.Tensor, grad: torch.Tensor, h: dict) -> None:
    total = _state(t, "sum")
    s = total.index_select(0, rows).addcmul_(grad, grad)
    total.index_copy_(0, rows, s)
    w = t.local.index_select(0, rows).sub_(h["lr"] * grad / s.sqrt_().add_(h["eps"]))
    t.local.index_copy_(0, rows, w)


def adam_update(t: DistTensor, rows: torch.Tensor, grad: torch.Tensor, h: dict) -> None:
    beta1, beta2 = h["betas"]
    exp_avg, exp_avg_sq = _state(t, "exp_avg"), _state(t, "exp_avg_sq")
    m = exp_avg.index_select(0, rows).lerp_(grad, 1 - beta1)
    v = exp_avg_sq.index_select(0, rows).lerp_(grad * grad, 1 - beta2)
    exp_avg.index_copy_(0, rows, m)
    exp_avg_sq.index_copy_(0, rows, v)
    step = h["step"]
    step_size = h["lr"] * math.sqrt(1 - beta2**step) / (1 - beta1**step)
    w = t.local.index_select(0, rows).sub_(step_size * m / v.sqrt_().add_(h["eps"]))
    t.local.index_copy_(0, rows, w)


UPDATES = {"adagrad": adagrad_update, "adam": adam_update}


class SparseOptimizer:
    """Base: collects each embedding's touched rows and ships their gradients to the owners."""

    update = ""

    def __init__(self, params: list[DistEmbedding], lr: float) -> None:
        if lr <= 0:
            raise ValueError(f"lr={lr}: must be > 0")
        self.params, self.lr, self.step_count = list(params), lr, 0

    def hyper(self) -> dict:
        return {"lr": self.lr}

    def zero_grad(self) -> None:
        for emb in self.params:
            emb.trace.clear()

    @torch.no_grad()
    def step(self) -> None:
        self.step_count += 1
        hyper = self.hyper()
        for emb in self.params:
            touched = emb.pop_gradients()
            if touched is not None:
                emb.weight.apply(self.update, touched[0], touched[1], hyper)


class SparseAdagrad(SparseOptimizer):
    update = "adagrad"

    def __init__(self, params: list[DistEmbedding], lr: float, eps: float = 1e-10) -> None:
        super().__init__(params, lr)
        self.eps = eps

    def hyper(self) -> dict:
        return {"lr": self.lr, "eps": self.eps}


class SparseAdam(SparseOptimizer):
    update = "adam"

    def __init__(
        self,
        params: list[DistEmbedding],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        super().__init__(params, lr)
        self.betas, self.eps = betas, eps

    def hyper(self) -> dict:
        return {"lr": self.lr, "betas": self.betas, "eps": self.eps, "step": self.step_count}
