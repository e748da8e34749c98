"""`EpochBatching`: THE rule that cuts a loader's inputs into batches, epoch after epoch.

Local loaders (`app.loader`) and distributed ones (`app.distributed`) hold this one record, so
both cut and seed the same batches: epoch e's order is a permutation seeded by `(seed, e)`
(inputs in their given order without `shuffle`), and batch i of epoch e samples with the seed
derived from `(seed, e, i)`. A batch therefore depends on its seed only, whoever samples it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from app.sampler.kernel import derive_seed

_SEED_MASK = 0x7FFFFFFFFFFF  # torch.Generator seeds: non-negative, below 2**63


@dataclass(frozen=True)
class EpochBatching:
    """Batch size, per-epoch seeded shuffle, drop_last, and the seed both derive from."""

    batch_size: int = 1
    shuffle: bool = False
    drop_last: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size}: pass a batch size >= 1")

    def num_batches(self, num_items: int) -> int:
        """Batches per epoch over `num_items` inputs."""
        if self.drop_last:
            return num_items // self.batch_size
        return -(-num_items // self.batch_size)

    def indices(self, num_items: int, epoch: int) -> list[Tensor]:
        """The input positions of every batch of `epoch`, in order."""
        if self.shuffle:
            gen = torch.Generator().manual_seed(derive_seed(self.seed, epoch) & _SEED_MASK)
            order = torch.randperm(num_items, generator=gen)
        else:
            order = torch.arange(num_items)
        return list(order.split(self.batch_size))[: self.num_batches(num_items)]

    def batch_seed(self, epoch: int, index: int) -> int:
        """The sampling seed of batch `index` of `epoch`."""
        return derive_seed(self.seed, epoch, index)
