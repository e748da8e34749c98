"""Launchers watching each other (`app.launch.peers`) over a real store on 127.0.0.1: a node
that stops beating is named by node 0, a node 0 that goes away is named by the others, and a
node that finished is never mistaken for a lost one."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from app.launch.peers import PeerWatch
from app.launch.plan import free_ports
from app.train.wire import WireMeter, read_counters
from tests.helpers.load import scaled

TIMEOUT_S = 2.0


def _pair() -> tuple[PeerWatch, PeerWatch]:
    (port,) = free_ports(1)
    w0 = PeerWatch(0, 2, {0: "127.0.0.1"}, port, TIMEOUT_S, beat_s=0.2).start()
    w1 = PeerWatch(1, 2, {0: "127.0.0.1"}, port, TIMEOUT_S, beat_s=0.2).start()
    return w0, w1


def _until(pred, limit_s: float):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    return None


def _beating(w0: PeerWatch, w1: PeerWatch) -> None:
    """Both have beaten for longer than the timeout, and neither sees the other lost."""
    time.sleep(TIMEOUT_S + 1)
    assert w0.lost() is None and w1.lost() is None


def test_a_silent_node_is_named_by_node_0():
    w0, w1 = _pair()
    try:
        _beating(w0, w1)
        w1.close()  # node 1 stops beating, as a machine cut off
        line = _until(w0.lost, TIMEOUT_S + 3)
        assert line.startswith("node 1 (127.0.0.1) unreachable from node 0: its launcher stopped")
    finally:
        w0.close()
        w1.close()


def test_node_0_gone_is_named_by_the_others():
    w0, w1 = _pair()
    try:
        _beating(w0, w1)
        w0.close()  # node 0's launcher, and the store it serves, go away
        line = _until(w1.lost, TIMEOUT_S + 8)
        # the store's loss or the missed beats, whichever node 1 sees first: both name node 0
        assert line.startswith("node 0 (127.0.0.1) unreachable from node 1: its launcher"), line
    finally:
        w0.close()
        w1.close()


@pytest.mark.dist
def test_a_launcher_whose_node_0_never_served_exits_clean():
    """Node 0's store never up (its machine gone before the job): node 1's watch gives up each
    connect in Python, quickly and quietly, so the launcher's exit never finds the beat thread
    inside torch's connect (an interpreter exit then aborts: SIGABRT, seen in CI) and its
    console gets no C++ backtraces."""
    (port,) = free_ports(1)
    script = (
        "import time; from app.launch.peers import PeerWatch\n"
        f"w = PeerWatch(1, 2, {{0: '127.0.0.1'}}, {port}, 30.0, beat_s=0.2).start()\n"
        "time.sleep(1.5); t = time.monotonic(); w.close()\n"
        "print(round(time.monotonic() - t, 2), w._thread.is_alive())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    took, alive = proc.stdout.split()
    assert alive == "False" and float(took) < scaled(1.0), proc.stdout
    assert "c10d" not in proc.stderr, proc.stderr[-2000:]


def test_a_finished_node_is_not_lost():
    w0, w1 = _pair()
    try:
        _beating(w0, w1)
        w1.finish()  # marks done/1 and stops beating
        time.sleep(TIMEOUT_S + 1)
        assert w0.lost() is None
        start = time.monotonic()
        w0.finish()  # every node done: returns at once
        assert time.monotonic() - start < scaled(1.0)
    finally:
        w0.close()
        w1.close()


def test_wire_metrics_per_host_and_batch():
    meter = WireMeter(node_rank=1, num_nodes=2, reads=True)
    m = meter.metrics("batch", (1000.0, 500.0), (3000.0, 1500.0), per=4)
    assert m["wire_sent_bytes_per_batch_h1"] == 500.0
    assert m["wire_recv_bytes_per_batch_h1"] == 250.0
    assert m["wire_sent_bytes_per_batch_h0"] == 0.0  # no process group: only this host's
    assert m["wire_bytes_per_batch"] == 250.0  # all hosts' sent bytes / batches / hosts
    sent, recv = read_counters()
    assert sent >= 0 and recv >= 0
    assert WireMeter.for_job() is None  # not a launched trainer (no DISTGNN_* variables)
