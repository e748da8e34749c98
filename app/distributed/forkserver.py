"""A clean parent for a hand-launched script's sampler processes.

A fork copies the parent's OpenMP state but not its pool's threads: once a script has run one
multi-threaded torch op (loading a partition checks its features with one), a forked child's
first parallel op waits forever in libgomp for threads that do not exist. Spawning a fresh
interpreter per sampler avoids that, but imports torch and PyG once per sampler, and
multiprocessing's `spawn` and `forkserver` also re-run the script's main module (a script
without a `__main__` guard would start training in every sampler).

So a loader starts one fresh interpreter, this module's `main`: it imports the sampler's code,
never runs a parallel op nor starts a thread, and forks each sampler from that clean state on
request. The trainer talks to it over its stdin/stdout (pickled frames); the server's exit
ends its samplers, and its trainer's exit ends the server (stdin closes), whatever killed the
trainer: no sampler outlives its script.
"""

from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO, Any

from app.fsutil import die_with_parent, pid_alive

_HEADER = struct.Struct("!I")
EXIT_GRACE_S = 10.0  # samplers' time to leave RPC on their own once the server is told to end
# The server's entry (not `-m`: runpy would run this module a second time, as `__main__`,
# after the package's import of it).
SERVER_MAIN = (
    "import sys; from app.distributed.forkserver import main; "
    "sys.exit(main(int(sys.argv[1]), sys.argv[2]))"
)


def _write(stream: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_exact(stream: IO[bytes], size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _read(stream: IO[bytes]) -> Any:
    """One frame; None at end of stream."""
    head = _read_exact(stream, _HEADER.size)
    body = None if head is None else _read_exact(stream, _HEADER.unpack(head)[0])
    return None if body is None else pickle.loads(body)


# -- the trainer's side -------------------------------------------------------------------------


@dataclass
class SamplerProcess:
    """A sampler forked by the server: a grandchild of the trainer, watched by its pid."""

    name: str
    pid: int

    def is_alive(self) -> bool:
        return pid_alive(self.pid)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)

    def _signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)


class ForkServer:
    """The trainer's handle on its fork server (a fresh interpreter running `main`)."""

    def __init__(self, preload: str) -> None:
        """Start the server; it imports module `preload` (what its forks run) once."""
        # Its own session: a Ctrl-C in the terminal reaches the trainer only, which then
        # stops its samplers in order; stderr is the trainer's, so sampler lines show there.
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER_MAIN, str(os.getpid()), preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )

    def start(self, name: str, target: str, args: tuple) -> SamplerProcess:
        """Fork a sampler running `target` (`module:function`) with `args`; its handle."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            _write(self.proc.stdin, (name, target, args))
            reply = _read(self.proc.stdout)
        except (BrokenPipeError, OSError):
            reply = None
        if reply is None:
            code = self.proc.wait(5.0)
            raise RuntimeError(
                f"the sampler fork server exited (code {code}) before starting {name}: see the "
                "lines above"
            )
        return SamplerProcess(name, int(reply))

    def close(self, timeout: float = EXIT_GRACE_S + 5.0) -> None:
        """End the server (its samplers get SIGTERM, then SIGKILL after a grace); wait for it."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# -- the server ---------------------------------------------------------------------------------


def _child(requests: IO[bytes], replies: IO[bytes], target: str, args: tuple) -> None:
    """In the forked sampler: drop the server's pipes, then run `target` (which exits)."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # the sampler's prints go to the trainer's stderr, not the reply pipe
    requests.close()
    replies.close()
    module, func = target.split(":")
    code = 1
    try:
        code = getattr(importlib.import_module(module), func)(*args) or 0
    finally:
        os._exit(code)


def _reap(children: set[int]) -> None:
    for pid in list(children):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            children.discard(pid)


def _end(children: set[int]) -> None:
    """SIGTERM every sampler still running, SIGKILL those left after the grace."""
    for sig, wait in ((signal.SIGTERM, EXIT_GRACE_S), (signal.SIGKILL, 5.0)):
        for pid in children:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while children and time.monotonic() < deadline:
            _reap(children)
            time.sleep(0.05)


def main(trainer_pid: int, preload: str) -> int:
    """Import `preload`, then serve fork requests from stdin until it closes or the trainer is
    gone; then end the samplers. Single-threaded, no parallel op: every fork starts clean."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the trainer decides when samplers stop
    importlib.import_module(preload)

    requests = open(0, "rb", buffering=0, closefd=False)  # unbuffered: `select` sees all input
    replies = sys.stdout.buffer
    children: set[int] = set()
    try:
        while True:
            ready, _, _ = select.select([requests], [], [], 0.5)
            _reap(children)
            if not ready:
                if not pid_alive(trainer_pid):
                    break
                continue
            request = _read(requests)
            if request is None:
                break
            name, target, args = request
            pid = os.fork()
            if pid == 0:
                _child(requests, replies, target, args)
            children.add(pid)
            _write(replies, pid)
    finally:
        _end(children)
    return 0
