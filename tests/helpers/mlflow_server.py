"""A real MLflow tracking server on 127.0.0.1 for the tests that need one (`mlflow server`,
the venv's own, on a free port), started and stopped by the test.

Its store is a SQLite file and its artifacts a folder, both under the test's tmp dir, so a test
can read what reached the server's own database, byte for byte.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.ports import free_port

START_CAP_S = 600.0  # importing the server's app takes 40-80 s at load 14 on 2 cores


@dataclass
class Server:
    uri: str  # http://127.0.0.1:<port>
    db: Path  # its backend store
    artifacts: Path  # its artifacts destination


def _up(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (uvicorn and its workers), SIGKILL after 10 s."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextmanager
def mlflow_server(root: Path) -> Iterator[Server]:
    """A running server with its store under `root`; stopped on exit, whatever happened."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = Server(f"http://127.0.0.1:{port}", root / "server.db", root / "server-artifacts")
    mlflow = Path(sys.executable).parent / "mlflow"
    cmd = [
        str(mlflow), "server", "--backend-store-uri", f"sqlite:///{server.db}",
        "--artifacts-destination", str(server.artifacts),
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    log = open(root / "server.log", "w")  # noqa: SIM115  (closed below, after the server)
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=root
    )
    try:
        deadline = time.monotonic() + START_CAP_S
        while not _up(server.uri):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (root / "server.log").read_text()[-2000:]
                raise RuntimeError(f"mlflow server on port {port} never answered:\n{tail}")
            time.sleep(0.5)
        yield server
    finally:
        stop(proc)
        log.close()
