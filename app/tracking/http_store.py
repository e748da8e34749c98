"""A tracking server (`mlflow.tracking_uri=http://…`): bounded calls on a failure path.

MLflow's HTTP client retries a failed call 7 times with exponential backoff, each try waiting
up to 120 s (`MLFLOW_HTTP_REQUEST_MAX_RETRIES`, `MLFLOW_HTTP_REQUEST_TIMEOUT`): against a server
that is down or cut off, a launcher sat in them for minutes. The calls a failing or stopped
job still makes (its culprit as the run's `error` tag, its status, its logs) run inside
`bounded_http`: no retry, a short timeout each.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

FAILURE_PATH_TIMEOUT_S = 5  # per MLflow HTTP call on a failure path, no retry


@contextmanager
def bounded_http(timeout_s: int = FAILURE_PATH_TIMEOUT_S) -> Iterator[None]:
    """Inside, each MLflow HTTP call tries once and gives up after `timeout_s` (MLflow reads
    both variables at every call)."""
    bounds = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout_s)}
    saved = {k: os.environ.get(k) for k in bounds}
    os.environ.update(bounds)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
