"""`train.objective` → its task class: a new objective is one module and one line here."""

from __future__ import annotations

from app.config import Config
from app.task.base import Task
from app.task.link import LinkTask
from app.task.node import NodeTask
from app.task.source import GraphSource

TASKS: dict[str, type[Task]] = {"node": NodeTask, "link": LinkTask}


def build_task(cfg: Config, source: GraphSource) -> Task:
    """The configured objective over `source` (homogeneous or heterogeneous alike)."""
    try:
        kind = TASKS[cfg.train.objective]
    except KeyError:
        raise ValueError(
            f"train.objective={cfg.train.objective!r}: expected one of {', '.join(TASKS)}"
        ) from None
    return kind(cfg, source)
