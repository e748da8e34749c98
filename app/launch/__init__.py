"""Distributed jobs: plan, partition, spawn, watch (`app.launch.job.run_job`).

The names below load `app.launch.job` on first use only: every child starts as
`python -m app.launch.worker`, which imports this package first, and must begin beating its
heartbeat (`app.launch.heartbeat`) before torch is imported.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["JobFailed", "partition_lock", "partitions_dir", "run_job"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("app.launch.job"), name)
    raise AttributeError(f"module 'app.launch' has no attribute {name!r}")
