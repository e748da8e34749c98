"""A tracking server (`mlflow.tracking_uri=http://…`): reached at start, and bounded calls.

MLflow's HTTP client retries a failed call 7 times with exponential backoff, each try waiting
up to 120 s (`MLFLOW_HTTP_REQUEST_MAX_RETRIES`, `MLFLOW_HTTP_REQUEST_TIMEOUT`): against a server
that is down or cut off, a job said nothing for minutes, then failed. So the launcher (and a
single-process run) connects to the server once before any work, and fails in one line when
nothing answers; and the calls a failing or stopped job still makes (its culprit as the run's
`error` tag, its status, its logs) run inside `bounded_http`: no retry, a short timeout each.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from app.config import ConfigError
from app.tracking.redact import redact_text

CONNECT_TIMEOUT_S = 5.0
FAILURE_PATH_TIMEOUT_S = 5  # per MLflow HTTP call on a failure path, no retry


def server_address(uri: str) -> tuple[str, int] | None:
    """(host, port) of an `http(s)://` tracking URI, else None (a SQLite file, a folder)."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:  # `http://host:notaport`
        raise ConfigError(f"mlflow.tracking_uri={redact_text(uri)!r}: bad port") from None
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def check_server(uri: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse, in one line within `timeout_s`, a tracking server nothing answers on."""
    address = server_address(uri)
    if address is None:
        return
    host, port = address
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as err:
        why = "no answer" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise ConfigError(
            f"mlflow.tracking_uri={redact_text(uri)!r}: no tracking server at {host}:{port} "
            f"({why}); start it, or log locally with mlflow.tracking_uri=sqlite:///<file>.db"
        ) from None


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
