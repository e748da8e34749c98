"""Sparse optimizers for `DistEmbedding`: `SparseAdagrad` and `SparseAdam` (DGL parity).

A step touches only the rows looked up since the previous step: the trainer sums each row's
gradient, sends it to the row's owner, and the owner updates the row and its optimizer state
(kept beside its shard; the rules, `UPDATES`, live beside it in `app.distributed.tensor`). They
match `torch.optim.Adagrad` on sparse gradients and `torch.optim.SparseAdam`, so a
single-process dense reference gives the same numbers.
"""

from __future__ import annotations

import torch

from app.distributed.embedding import DistEmbedding


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
