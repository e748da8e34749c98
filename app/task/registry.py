"""`train.objective` → its task class: a new objective is one module and one line in
`OBJECTIVES`.

Classes are named as `module:attr` strings (`app.entrypoint`) so `app.config` reads the names
here without importing the tasks (which import the config).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.entrypoint import resolve

if TYPE_CHECKING:
    from app.config import Config
    from app.task.base import Task
    from app.task.source import GraphSource

OBJECTIVES: dict[str, str] = {"node": "app.task.node:NodeTask", "link": "app.task.link:LinkTask"}


def build_task(cfg: Config, source: GraphSource) -> Task:
    """The configured objective over `source` (homogeneous or heterogeneous alike)."""
    if cfg.train.objective not in OBJECTIVES:
        raise ValueError(
            f"train.objective={cfg.train.objective!r}: expected one of {', '.join(OBJECTIVES)}"
        )
    return resolve(OBJECTIVES[cfg.train.objective])(cfg, source)
