"""`make ui`'s server: it stops, with every process it started, on SIGTERM as on Ctrl-C."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from tests.helpers.jobs import REPO, default_sigint
from tests.helpers.load import scaled

pytestmark = [pytest.mark.dist, pytest.mark.long]  # mlflow ui takes 20 s to minutes to start


def _store(tmp_path):
    from mlflow.tracking import MlflowClient

    db = tmp_path / "mlflow.db"
    client = MlflowClient(f"sqlite:///{db}")
    client.create_run(client.create_experiment("ui"))
    return db


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_ui_server_stops_within_5_s_leaving_nothing(tmp_path, sig):
    from app.tracking.ui import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "app.tracking.ui", "serve", "--store", str(_store(tmp_path))]
    ui = subprocess.Popen(
        [*cmd, "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        for line in ui.stdout:  # the URL is printed once the server answers
            if line.startswith("MLflow UI: "):
                break
        server = psutil.Process(ui.pid).children(recursive=True)
        assert server, "mlflow ui not started"
        start = time.monotonic()
        ui.send_signal(sig)
        assert ui.wait(timeout=scaled(10)) == 0
        assert time.monotonic() - start < scaled(5)
        assert not [p for p in server if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # the port is free again
    finally:
        if ui.poll() is None:
            ui.kill()
            ui.wait()
