"""Liveness by heartbeat: every child beats into a file; its launcher fails a silent one.

A stopped (SIGSTOP), frozen or cut-off process does not exit, so watching exit codes alone
leaves its peers to find out through RPC timeouts that add up along a sampling chain
(`rpc_timeout × (hops + 2)`). Instead each child runs a daemon thread that rewrites a counter
in `<job_dir>/heartbeats/<name>` every `cluster.heartbeat_s`; the launcher of its machine
reads the counters while it waits for exits and declares a child dead when its counter has not
changed for `cluster.heartbeat_timeout_s` by the launcher's own clock (so clock skew between
hosts of a shared file system does not matter). The first beat is due that long after start.

Stdlib only, and started before anything heavy is imported: a child that beats late is
indistinguishable from a silent one.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

FILE_ENV = "DISTGNN_HEARTBEAT_FILE"
INTERVAL_ENV = "DISTGNN_HEARTBEAT_S"
WIDTH = 20  # digits of the counter: a fixed size, so a reader never sees a half-written file


def heartbeat_env(path: Path, interval_s: float) -> dict[str, str]:
    """The variables that make a child beat into `path` every `interval_s` seconds."""
    return {FILE_ENV: str(path), INTERVAL_ENV: repr(float(interval_s))}


def _beat(fd: int, interval_s: float) -> None:
    count = 0
    while True:
        count += 1
        try:
            os.pwrite(fd, f"{count:0{WIDTH}d}".encode(), 0)
        except OSError:
            pass  # a full disk is not death: the launcher reports the silence if it lasts
        time.sleep(interval_s)


def start_heartbeat(environ: Mapping[str, str] = os.environ) -> threading.Thread | None:
    """Child side: beat in a daemon thread if the launcher asked for it (None otherwise)."""
    path = environ.get(FILE_ENV)
    if not path:
        return None
    interval_s = float(environ.get(INTERVAL_ENV, "1.0"))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    thread = threading.Thread(target=_beat, args=(fd, interval_s), name="heartbeat", daemon=True)
    thread.start()
    return thread


@dataclass
class _Beat:
    path: Path
    seen: bytes = b""
    since: float = field(default_factory=time.monotonic)  # when `seen` last changed


@dataclass
class HeartbeatWatch:
    """Launcher side: which child has not beaten for `timeout_s` seconds."""

    timeout_s: float
    beats: dict[str, _Beat] = field(default_factory=dict)

    def add(self, name: str, path: Path) -> None:
        """Watch `name` from now on; its first beat is due within `timeout_s`."""
        path.unlink(missing_ok=True)  # a file left by an earlier job is no beat of this one
        self.beats[name] = _Beat(path)

    def silent(self, now: float | None = None) -> tuple[str, float] | None:
        """(name, seconds of silence) of the first child silent for over `timeout_s`, or None."""
        now = time.monotonic() if now is None else now
        for name, beat in self.beats.items():
            try:
                counter = beat.path.read_bytes()
            except OSError:
                counter = b""
            if counter != beat.seen:
                beat.seen, beat.since = counter, now
            elif now - beat.since > self.timeout_s:
                return name, now - beat.since
        return None

    def forget(self, name: str) -> None:
        """Stop watching a child that exited (its exit code tells the rest)."""
        self.beats.pop(name, None)
