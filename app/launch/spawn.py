"""Start a plan's processes, watch them, and stop all of them on the first failure.

Every child runs in its own process group (so a signal reaches its helpers too) with its
stdout+stderr piped through a reader thread into `<log_dir>/<name>.log`, each line prefixed by
`[name]`; the chosen children (rank-0 trainer) are also echoed to the console, their progress
bars redrawn in place on a terminal (`app.tracking.progress_lines`). Linux children also get PDEATHSIG=SIGTERM, so even a
SIGKILLed launcher leaves no orphans.

Failure handling: the first child to exit non-zero stops the job; every other child gets SIGTERM,
then SIGKILL after `shutdown_timeout_s`, and `JobFailed` names the child, its exit code, its
error line and its log in one line. A child silent longer than its heartbeat timeout (stopped,
frozen, cut off; `app.launch.heartbeat`) fails the job the same way, named. SIGINT/SIGTERM on
the launcher stop every child the same way and re-raise `KeyboardInterrupt`. Cleanup runs in
`finally`, on every path.
"""

from __future__ import annotations

import io
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from app.fsutil import die_with_parent
from app.launch import heartbeat
from app.launch.console import Heard, JobConsole, Quiet
from app.launch.heartbeat import HeartbeatWatch
from app.launch.interrupt import TERMINATED, check_terminated
from app.launch.peers import PeerWatch
from app.launch.plan import ProcSpec
from app.launch.pss import PssMonitor
from app.launch.worker import ERROR_MARK
from app.tracking.progress import ticking
from app.tracking.progress_lines import PROGRESS_ENV, PROGRESS_MARK, BarView
from app.tracking.redact import redact_text

TAIL_LINES = 20
# Set by torchrun for *this* launcher process; a child must not mistake them for its own
# (TORCHELASTIC_USE_AGENT_STORE, for one, makes every c10d store a client of torchrun's).
LAUNCHER_PREFIXES = ("TORCHELASTIC_",)
LAUNCHER_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)


class JobFailed(RuntimeError):
    """A child of the job exited non-zero; carries its name, exit code and last log lines.

    Its message is one line: the culprit (`trainer0-0 failed (exit code 1): ValueError: bad`)
    and the child's log; the traceback stays in that log.
    """

    def __init__(
        self, name: str, returncode: int, tail: list[str], log_path: Path, reason: str = ""
    ) -> None:
        self.name, self.returncode, self.tail, self.log_path = name, returncode, tail, log_path
        how = reason or (
            f"killed by signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
        )
        line = _culprit_line(tail)
        self.culprit = f"{name} failed ({how})" + (f": {line}" if line else "")
        super().__init__(f"{self.culprit}; log {log_path}")


class PeerLost(JobFailed):
    """Another machine of the job stopped answering (`app.launch.peers`); `culprit` names it."""

    def __init__(self, line: str) -> None:
        RuntimeError.__init__(self, line)
        self.name, self.returncode, self.tail, self.log_path = "launcher", 1, [], Path()
        self.culprit = line


def _culprit_line(tail: list[str]) -> str:
    """The line of a child's last output that says why: the worker's own error line (after its
    `ERROR_MARK`), else its exception line (`ValueError: bad`), else its last error line (an
    ERROR log record too), else "": a last line such as `joined the RPC group` says nothing
    about the failure, and must not read as its reason."""
    for line in reversed(tail):
        if ERROR_MARK in line:
            return line.split(ERROR_MARK, 1)[1].strip()
    for pattern in (_EXCEPTION_LINE, _ERROR_LINE):
        for line in reversed(tail):
            if pattern.search(line):
                return line.strip()
    return ""


_TRACEBACK = "Traceback (most recent call last):"
_LOG_RECORD = re.compile(r"^\[[\w.-]+\] \d\d:\d\d:\d\d ")  # app.tracking.logging.FORMAT
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b(: |$)")
# `error:`-ish words; an ERROR / CRITICAL record (app.tracking.logging); torch's C++ `[E …]`
_ERROR_LINE = re.compile(
    r"(Error|Exception|error:|failed|Killed|Terminated)\b"
    r"|^(\[[\w.-]+\] )?\d\d:\d\d:\d\d [EC] |^\[E[\s\d]"
)


@dataclass
class Child:
    """A started process and the thread copying its output to its log file."""

    spec: ProcSpec
    proc: subprocess.Popen[bytes]
    log_path: Path
    reader: threading.Thread
    tail: deque[str]
    echo: threading.Event  # cleared when the job stops: children's shutdown noise stays in logs
    heard: Heard  # up once it printed; when its output last reached the console

    def quiet(self) -> Quiet:
        """This child as `JobConsole` watches it."""
        return Quiet(
            self.spec.name,
            self.heard,
            lambda: self.proc.poll() is None,
            lambda: self.tail[-1] if self.tail else "",
        )


class _LogFile:
    """A child's log file whose write errors (ENOSPC, EIO) never stop the pump.

    Lines that cannot be written are counted and reported once, on the launcher's stderr and
    in the file itself if space comes back; the child's pipe is drained either way, so a full
    disk can never block a child on a full pipe.
    """

    def __init__(self, path: Path) -> None:
        self.path, self.lost, self.error = path, 0, ""
        try:
            self.fh: IO[str] | None = open(path, "a", encoding="utf-8")
        except OSError as err:
            self.fh = None
            self._failed(err)

    def _failed(self, err: OSError) -> None:
        if not self.error:
            self.error = err.strerror or str(err)
            print(f"[launcher] cannot write {self.path}: {self.error}", file=sys.stderr)

    def write(self, line: str) -> None:
        if self.fh is None:
            self.lost += 1
            return
        try:
            if self.lost:
                self.fh.write(f"[launcher] {self.lost} lines lost: {self.error}\n")
            self.fh.write(line + "\n")
            self.fh.flush()
            self.lost = 0
        except OSError as err:
            self.lost += 1
            self._failed(err)
            self._drop_buffer()

    def _drop_buffer(self) -> None:
        """Reopen the file: a failed flush leaves its bytes in the buffer, to fail again."""
        fh, self.fh = self.fh, None
        try:
            fh.close()
        except OSError:
            pass
        try:
            self.fh = open(self.path, "a", encoding="utf-8")
        except OSError:
            self.fh = None

    def close(self) -> None:
        if self.fh is not None:
            try:
                self.fh.close()
            except OSError:
                pass


def _pump(
    name: str,
    pipe: IO[bytes],
    log_path: Path,
    tail: deque[str],
    echo: threading.Event,
    heard: Heard,
) -> None:
    """Copy `pipe` to the log file line by line, prefixed by the name.

    Progress bar states (`app.tracking.progress_lines`: marked lines, or segments ended by a
    bare `\r`) go through a `BarView`: redrawn in place on a terminal console, whole lines
    every few seconds in the log. Reads until the child closes its end, whatever happens to
    the log file or the console.
    """
    prefix = f"[{name}] "
    text = io.TextIOWrapper(pipe, encoding="utf-8", errors="replace", newline="")
    log = _LogFile(log_path)
    bars = BarView(sys.stdout, _console_is_tty())
    traceback = False  # inside a traceback: logged, not echoed (the launcher says why in a line)
    try:
        for segment in text:
            raw = segment.rstrip("\r\n").removeprefix(prefix)  # log records carry it already
            raw = redact_text(raw)  # the log file is uploaded, the console may be shared
            bar = raw.startswith(PROGRESS_MARK) or (segment.endswith("\r") and bool(raw))
            heard.line(echo.is_set())
            if bar:
                state = raw.removeprefix(PROGRESS_MARK).strip()
                for line in bars.show(prefix + state if state else "", echo.is_set()):
                    log.write(line)
                continue
            if not raw:  # progress bars start with a bare "\r": no empty prefixed lines
                continue
            line = prefix + raw
            log.write(line)
            tail.append(raw)
            traceback = raw.startswith(_TRACEBACK) or (traceback and not _LOG_RECORD.match(raw))
            if echo.is_set() and not traceback:
                bars.line(line)
    finally:
        for line in bars.show("", echo.is_set()):  # a bar cut off by the child's exit
            log.write(line)
        log.close()


def _console_is_tty() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False


def base_env() -> dict[str, str]:
    """The launcher's environment minus the variables torchrun set for the launcher itself."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in LAUNCHER_VARS and not k.startswith(LAUNCHER_PREFIXES)
    }


def start_child(spec: ProcSpec, log_dir: Path, echo: bool = False) -> Child:
    """Start one child in its own process group, its output pumped to `<log_dir>/<name>.log`."""
    log_path = log_dir / f"{spec.name}.log"
    proc = subprocess.Popen(
        spec.cmd,
        env={**base_env(), **spec.env, PROGRESS_ENV: "1"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    echoing = threading.Event()
    if echo:
        echoing.set()
    assert proc.stdout is not None
    heard = Heard()
    reader = threading.Thread(
        target=_pump,
        args=(spec.name, proc.stdout, log_path, tail, echoing, heard),
        name=f"pump-{spec.name}",
        daemon=True,
    )
    reader.start()
    return Child(spec, proc, log_path, reader, tail, echoing, heard)


def _signal_group(child: Child, sig: int) -> None:
    try:
        os.killpg(child.proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_children(children: Iterable[Child], timeout_s: float) -> None:
    """SIGTERM every child's process group, SIGKILL what is left after `timeout_s`, reap all."""
    children = list(children)
    running = sum(c.proc.poll() is None for c in children)
    with ticking(f"stopping {running} process{'es' if running != 1 else ''}"):
        _stop(children, timeout_s)


def _stop(children: list[Child], timeout_s: float) -> None:
    for c in children:
        c.echo.clear()
        _signal_group(c, signal.SIGTERM)
        _signal_group(c, signal.SIGCONT)  # a stopped child handles its SIGTERM (shm cleanup)
    deadline = time.monotonic() + timeout_s
    for c in children:
        try:
            c.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for c in children:
        _signal_group(c, signal.SIGKILL)  # also reaches helpers left in the group
        if c.proc.poll() is None:
            c.proc.kill()
        c.proc.wait(timeout=5)
    for c in children:
        c.reader.join(timeout=2)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM raises KeyboardInterrupt like Ctrl-C (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    received: list[int] = []

    def _raise(signum: int, frame: object) -> None:
        received.append(signum)
        TERMINATED.set()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a repeat must not cut the cleanup
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        if not received:  # after a SIGTERM, stay deaf to repeats until the process exits
            signal.signal(signal.SIGTERM, previous)


def _watch_exit(child: Child, exits: queue.Queue[Child]) -> None:
    child.proc.wait()
    exits.put(child)


SSH_FAILED = 255  # ssh's own exit code: connection refused, lost or timed out


def _failure(child: Child, reason: str = "") -> JobFailed:
    child.reader.join(timeout=5)  # the last lines are the interesting ones
    if not reason and child.spec.via_ssh and child.proc.returncode == SSH_FAILED:
        reason = f"ssh to {child.spec.host} lost: host down, link cut or sshd gone"
    return JobFailed(
        child.spec.name, child.proc.returncode, list(child.tail), child.log_path, reason
    )


def _watch_heartbeats(procs: list[ProcSpec], timeout_s: float | None) -> HeartbeatWatch:
    """A watch over every child that was told to beat (none when `timeout_s` is None)."""
    watch = HeartbeatWatch(float("inf") if timeout_s is None else timeout_s)
    for spec in procs:
        path = spec.env.get(heartbeat.FILE_ENV)
        if path and timeout_s is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            watch.add(spec.name, Path(path))
    return watch


def run_procs(
    procs: Iterable[ProcSpec],
    log_dir: str | os.PathLike,
    *,
    echo: Iterable[str] = (),
    shutdown_timeout_s: float = 10.0,
    timeout_s: float | None = None,
    heartbeat_timeout_s: float | None = None,
    peers: PeerWatch | None = None,
    memory: PssMonitor | None = None,
) -> None:
    """Run `procs` to completion; raise `JobFailed` on the first failure (after stopping all).

    Args:
        echo: names of children whose output also goes to the console.
        shutdown_timeout_s: SIGTERM → SIGKILL grace when stopping children.
        timeout_s: stop everything and raise `TimeoutError` after this long (None: no limit).
        heartbeat_timeout_s: a child told to beat (`app.launch.heartbeat`) that is silent this
            long fails the job like a crash, named (None: heartbeats not watched).
        peers: the other machines' launchers (env mode): one lost stops every child and
            raises `PeerLost` naming it.
        memory: counts each child (by its host) in the job's peak PSS per host.
    """
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    procs = list(procs)
    watch = _watch_heartbeats(procs, heartbeat_timeout_s)
    echo = set(echo)
    children: list[Child] = []
    exits: queue.Queue[Child] = queue.Queue()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        with sigterm_as_interrupt():
            started = JobConsole.starting(len(procs))
            for spec in procs:
                check_terminated()
                children.append(start_child(spec, log_dir, spec.name in echo))
                if memory is not None:
                    memory.add(spec.node_rank, children[-1].proc.pid)
                threading.Thread(
                    target=_watch_exit, args=(children[-1], exits), daemon=True
                ).start()
            with JobConsole([c.quiet() for c in children], started):
                _wait_all(children, exits, deadline, timeout_s, watch, peers, shutdown_timeout_s)
    finally:
        stop_children([c for c in children if c.proc.poll() is None], shutdown_timeout_s)
        for c in children:
            c.reader.join(timeout=2)


def _wait_all(
    children: list[Child],
    exits: queue.Queue[Child],
    deadline: float | None,
    timeout_s: float | None,
    watch: HeartbeatWatch,
    peers: PeerWatch | None,
    shutdown_timeout_s: float,
) -> None:
    """Wait for every child to exit 0; at the first failure or silent child, stop them all and
    raise `JobFailed` naming it."""
    by_name = {c.spec.name: c for c in children}
    for _ in children:
        child, silence = _next_event(exits, deadline, timeout_s, watch, by_name, peers)
        if silence is not None:
            stop_children(children, shutdown_timeout_s)
            raise _failure(child, f"no heartbeat for {silence:.1f} s: stopped, frozen or cut off")
        watch.forget(child.spec.name)
        if child.proc.returncode != 0:
            stop_children(children, shutdown_timeout_s)
            raise _failure(child)


def _next_event(
    exits: queue.Queue[Child],
    deadline: float | None,
    timeout_s: float | None,
    watch: HeartbeatWatch,
    by_name: dict[str, Child],
    peers: PeerWatch | None = None,
) -> tuple[Child, float | None]:
    """(the next child to exit, None) or (a silent child, seconds of silence); raises
    `PeerLost` (children still running: the caller's `finally` stops them) when another
    machine is lost. Short waits, so Ctrl-C / SIGTERM and heartbeats are handled promptly.
    """
    while True:
        check_terminated()
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"job did not finish within {timeout_s} s; stopped every process")
        try:
            return exits.get(timeout=0.2), None
        except queue.Empty:
            pass
        silent = watch.silent()
        if silent is not None:
            return by_name[silent[0]], silent[1]
        lost = peers.lost() if peers is not None else None
        if lost is not None:
            raise PeerLost(lost)
