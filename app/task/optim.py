"""`Optimizers`: the dense optimizer of the model and the sparse one of its embedding tables.

Stepped and zeroed together; `state_dict()` holds both (`{"dense": ..., "sparse": ...}`), so a
checkpoint restores the embedding rows' Adam / Adagrad moments too. The sparse part is the
tables' whole-table state (see `app.task.tables`): gathering it is a collective when the
tables are distributed, so every rank calls `state_dict()`.
"""

from __future__ import annotations

from typing import Any

import torch

from app.task.tables import Tables


class Optimizers:
    """Adam on the module parameters + the tables' sparse optimizer (if any tables)."""

    def __init__(self, dense: torch.optim.Optimizer, tables: Tables | None = None) -> None:
        self.dense, self.tables = dense, tables

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.dense.zero_grad(set_to_none=set_to_none)
        if self.tables is not None:
            self.tables.zero_grad()

    def step(self) -> None:
        self.dense.step()
        if self.tables is not None:
            self.tables.step()

    def state_dict(self) -> dict[str, Any]:
        sparse = self.tables.optimizer_state() if self.tables is not None else None
        return {"dense": self.dense.state_dict(), "sparse": sparse}

    def load_state_dict(self, state: dict[str, Any], rows: dict[str, Any] | None = None) -> None:
        """Restore both parts; `rows` (the checkpoint's embedding rows) go with the sparse one."""
        self.dense.load_state_dict(state["dense"])
        if self.tables is not None:
            self.tables.load(rows or {}, state["sparse"])
