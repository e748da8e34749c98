"""A training step whose loss is NaN or inf ends the run, naming where the non-finite value
came from: the first input tensor of the batch, else the first parameter, holding one.

Training on would only spread NaN through every weight and finish the run "successfully"
with `loss=nan`; the run fails instead (FAILED, with this line as its `error` tag).
"""

from __future__ import annotations

import json
import math
from typing import Any

from torch import Tensor, nn
from torch_geometric.data.data import BaseData


class NonFiniteLossError(FloatingPointError):
    """A training loss that is NaN or inf: one line with the epoch, step and culprit."""


def _count(t: Tensor) -> int:
    return int((~t.isfinite()).sum()) if t.is_floating_point() else 0


def first_non_finite(model: nn.Module, batch: object) -> str:
    """The first input of `batch` (its node / edge attributes), else the first parameter of
    `model`, that holds a NaN or inf, as 'input x (3 of 4096 values)'; else a hint."""
    if isinstance(batch, BaseData):
        for store in batch.stores:
            key_ = store._key  # None in a homogeneous batch; a node / edge type in a hetero one
            where = "" if key_ is None else f"{key_ if isinstance(key_, str) else '__'.join(key_)}."
            for key, value in store.items():
                if isinstance(value, Tensor) and (bad := _count(value)):
                    return f"input {where}{key} ({bad} of {value.numel()} values non-finite)"
    for name, param in model.named_parameters():
        if bad := _count(param.detach()):
            return f"parameter {name} ({bad} of {param.numel()} values non-finite)"
    return "every input and parameter is finite (the loss overflowed: lower train.lr)"


def check_loss(loss: float, model: nn.Module, batch: object, where: str) -> None:
    """Raise `NonFiniteLossError` when `loss` is NaN or inf; `where`: 'epoch 3, step 12'."""
    if math.isfinite(loss):
        return
    raise NonFiniteLossError(
        f"non-finite training loss ({loss}) in {where}: {first_non_finite(model, batch)}"
    )


def result_json(result: dict[str, Any]) -> str:
    """`result.json`'s text: strict JSON, a NaN or inf metric (an evaluation over an empty
    split, say) written as null, since bare `NaN` is no JSON and breaks every reader."""
    clean = {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in result.items()
    }
    return json.dumps(clean, indent=1, allow_nan=False)
