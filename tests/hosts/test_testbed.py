"""The testbed itself: up is idempotent, shapes each host's egress, down leaves nothing; a user
without root is refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.testbed.__main__ import main
from app.testbed.net import Testbed, leftovers, parse_rate, tbf_args
from tests.helpers.hosts import unavailable
from tests.helpers.jobs import REPO


def _qdisc(tb: Testbed, i: int) -> str:
    out = subprocess.run(
        tb.netns_cmd(i, ["tc", "qdisc", "show", "dev", "eth0"]), capture_output=True, text=True
    )
    return out.stdout


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.testbed", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_rates_parse_and_size_the_bucket():
    assert parse_rate("none") is None and parse_rate("") is None
    assert parse_rate("10gbit") == 10**10 and parse_rate("500mbit") == 5 * 10**8
    args = tbf_args(10**9)
    assert args[:3] == ["tbf", "rate", "1000000000bit"]
    assert int(args[args.index("burst") + 1]) >= 256 * 1024  # a 64 KiB GSO segment fits


def test_up_without_root_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the refusal path, as a user would see it
    assert main(["--prefix", "dgtnoroot", "up"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["testbed: testbed needs root (euid 1000): run it with sudo"]


@pytest.mark.dist
def test_bad_rate_is_one_line():
    proc = _cli("--prefix", "dgtbad", "up", "--rate", "fast")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "fast" in proc.stderr


@pytest.mark.dist
def test_up_is_idempotent_shapes_and_down_leaves_nothing():
    reason = unavailable()
    if reason:
        pytest.skip(f"multi-host testbed unavailable: {reason}")
    prefix = f"dgu{os.getpid() % 100000}"
    tb = Testbed(hosts=3, prefix=prefix)
    try:
        assert _cli("--prefix", prefix, "up", "--hosts", "3", "--rate", "1gbit").returncode == 0
        assert _cli("--prefix", prefix, "up", "--hosts", "3", "--rate", "1gbit").returncode == 0
        assert all("tbf" in _qdisc(tb, i) and "1Gbit" in _qdisc(tb, i) for i in range(3))
        ping = subprocess.run(  # h0 reaches h2 over the bridge: a TCP connect to a closed port
            tb.netns_cmd(0, [sys.executable, "-c", _CONNECT, tb.addr(2)]),
            capture_output=True, text=True,
        )  # fmt: skip
        assert ping.stdout.strip() == "refused", ping.stderr
        proc = _cli("--prefix", prefix, "up", "--hosts", "2", "--rate", "none")
        assert proc.returncode == 0, proc.stderr
        assert leftovers(prefix) == [
            f"netns {prefix}-h0", f"netns {prefix}-h1",
            f"link {prefix}-br", f"link {prefix}-v0", f"link {prefix}-v1",
        ]  # fmt: skip
        assert "tbf" not in _qdisc(tb, 0)
    finally:
        down = _cli("--prefix", prefix, "down")
    assert down.returncode == 0, down.stderr
    assert leftovers(prefix) == []
    assert _cli("--prefix", prefix, "down").returncode == 0  # idempotent


_CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 9), timeout=5)
except ConnectionRefusedError:
    print("refused")
"""
