"""The training step reads nothing back from the device: loss and correct predictions are
summed as tensors where the batch is, and read once per epoch (`EpochStats.settle`)."""

from __future__ import annotations

import torch
from torch import Tensor

from app.task.local import LocalSource
from app.task.metrics import EpochStats
from app.task.node import NodeTask
from app.train.loop import train_epoch
from tests.helpers.toy import toy_config, toy_graph


def test_device_sums_settle_to_the_float_sums():
    losses, correct, seeds = [0.7, 1.25, 0.3], [3, 10, 0], [4, 16, 2]
    ref, dev = EpochStats(), EpochStats()
    for loss, c, s in zip(losses, correct, seeds, strict=True):
        ref.add(float(torch.tensor(loss)), float(c), s, 10)  # the float32 loss, as before
        dev.add(torch.tensor(loss), torch.tensor(c), s, 10)
    assert isinstance(dev.loss_sum, Tensor) and isinstance(dev.correct, Tensor)
    assert dev.loss == ref.loss and dev.accuracy == ref.accuracy
    assert dev.reduced().to_dict() == ref.reduced().to_dict()
    assert type(dev.loss_sum) is float and type(dev.correct) is float


def test_an_epoch_keeps_its_sums_on_the_device_until_it_ends():
    """Every step hands the loop tensors and the loop adds them as tensors (no float() per
    step); the epoch's result is plain floats equal to the per-step values summed."""
    cfg = toy_config(batch_size=16)
    task = NodeTask(cfg, LocalSource(cfg, toy_graph(num_nodes=200, seed=1)))
    seen: list[tuple[type, type]] = []
    per_step: list[tuple[float, float, int]] = []
    step = task.step

    def recording_step(model, batch):
        res = step(model, batch)
        per_step.append((float(res.loss.detach()), float(res.correct), res.count))
        return res

    stats = train_epoch(
        task.model,
        task.loaders["train"],
        task.optimizer,
        recording_step,
        on_step=lambda s: seen.append((type(s.loss_sum), type(s.correct))),
    )
    assert len(seen) == stats.steps > 1
    assert all(types == (Tensor, Tensor) for types in seen)
    assert type(stats.loss_sum) is float and type(stats.correct) is float
    assert stats.correct == sum(c for _, c, _ in per_step)
    expected = sum(loss * n for loss, _, n in per_step)
    assert abs(stats.loss_sum - expected) <= 1e-9 * expected
