"""The RPC layer: init with bounded waits, partition routing, calls whose failures name the peer.

Every trainer and sampler of a job joins ONE `torch.distributed.rpc` group (TensorPipe) at
`distgnn-tcp://master_addr:rpc_port` (`app.netutil`: the rendezvous store listens on that
address only). Three rules keep it from ever hanging:

* init: rank 0 checks that the port is free (a clear error names it); the others wait for the
  master's store with a deadline instead of torch's 30 min default;
* calls: every call carries the job's RPC timeout, and `PendingCall.wait` turns any failure
  (timeout, dead peer, remote exception) into a `PeerError` naming the peer and partition;
* shutdown: graceful (a barrier) with a bounded wait, then a local (ungraceful) shutdown, run in
  a helper thread so even a stuck agent cannot block the caller past the deadline.

PyG's `torch_geometric.distributed.rpc` names are here too, on the same group: `init_rpc` /
`shutdown_rpc` take PyG's arguments, and `rpc_is_initialized`, `rpc_require_initialized`,
`rpc_register` + `rpc_async` / `rpc_sync` (calls registered by id), `global_all_gather`,
`global_barrier` (its failure is raised, not logged and swallowed as in PyG) and
`rpc_partition_to_workers` behave as PyG's.
"""

from __future__ import annotations

import errno
import functools
import itertools
import logging
import socket
import threading
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from torch.distributed import rpc

from app.distributed.context import DistContext
from app.distributed.endpoints import dispatch
from app.netutil import BOUND_SCHEME, register_bound_rendezvous
from app.runtime import node_workers

log = logging.getLogger("distgnn")

# TensorPipe's default "shm" transport busy-polls: each process's reactor thread spins in
# sched_yield, which on a node running trainers and samplers was half of all CPU time (kernel
# time, ~40k involuntary context switches/s; `bench.products_job`). "uv" (TCP) waits in epoll;
# tensor payloads still move through TensorPipe's channels (CMA between local processes).
TRANSPORTS = ["uv"]
# torch's TensorPipe init all-gathers the device maps over a `ProcessGroupGloo` backend object,
# which torch >= 2.0 warns about in every process that joins ("You are using a Backend <class
# ...ProcessGroupGloo> as a ProcessGroup"): torch's call inside `rpc.init_rpc`, not the user's.
GLOO_AS_GROUP = "You are using a Backend"

_lock = threading.Lock()
_state: dict[str, Any] = {"timeout": 60.0, "name": None}


class PeerError(RuntimeError):
    """An RPC peer failed: timed out, is gone, or raised. The message names peer and partition."""


class RpcInitError(RuntimeError):
    """The RPC group could not be formed (port in use, master unreachable, ...)."""


def is_initialized() -> bool:
    return _state["name"] is not None


def rpc_timeout() -> float:
    """The job's RPC timeout in seconds (every call and wait uses it)."""
    return float(_state["timeout"])


def current_name() -> str | None:
    return _state["name"]


def _check_port_free(addr: str, port: int) -> None:
    """Fail early, naming the port, if another process already listens on it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((addr, port))
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise RpcInitError(
                f"RPC port {port} on {addr} is already in use by another process: free it or "
                "pick another port (cluster.master_port, or 0 to let the launcher choose)"
            ) from None
        raise RpcInitError(f"cannot bind RPC port {port} on {addr}: {err}") from None
    finally:
        sock.close()


def _wait_for_master(addr: str, port: int, timeout_s: float) -> None:
    """Poll until the master's store accepts connections, or fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((addr, port), timeout=2.0):
                return
        except OSError as err:
            if time.monotonic() > deadline:
                raise RpcInitError(
                    f"RPC master {addr}:{port} did not accept connections within {timeout_s:.0f} s "
                    f"({err}): is rank 0 running, and are the address and port right?"
                ) from None
            time.sleep(0.2)


def init_rpc(
    current_ctx: DistContext,
    master_addr: str,
    master_port: int,
    num_rpc_threads: int = 32,
    rpc_timeout: float | None = None,
    rpc_worker_names: Any = None,
    *,
    timeout_s: float = 60.0,
    init_timeout_s: float = 120.0,
) -> None:
    """Join the job's RPC group as `ctx.worker_name` (idempotent within a process).

    PyG's arguments: `num_rpc_threads`, `rpc_timeout` (seconds; our name `timeout_s`, the
    default 60); `rpc_worker_names` must be empty (names come from the context).
    `init_timeout_s` bounds the wait for the master.
    """
    if rpc_worker_names:
        raise ValueError(f"rpc_worker_names={rpc_worker_names!r}: RPC names are derived from the "
                         "DistContext; pass None")  # fmt: skip
    ctx, num_threads = current_ctx, num_rpc_threads
    timeout_s = float(rpc_timeout) if rpc_timeout is not None else timeout_s
    with _lock:
        if is_initialized():
            return
        if ctx.global_rank == 0:
            _check_port_free(master_addr, master_port)
        else:
            _wait_for_master(master_addr, master_port, init_timeout_s)
        register_bound_rendezvous()  # the rendezvous store listens on master_addr only
        options = rpc.TensorPipeRpcBackendOptions(
            num_worker_threads=num_threads,
            _transports=TRANSPORTS,
            rpc_timeout=max(timeout_s, init_timeout_s),  # also bounds the init all-gather
            init_method=f"{BOUND_SCHEME}://{master_addr}:{master_port}?timeout_s={init_timeout_s:g}",
        )
        try:
            with warnings.catch_warnings():  # torch's own init all-gather: see GLOO_AS_GROUP
                warnings.filterwarnings("ignore", GLOO_AS_GROUP, UserWarning)
                rpc.init_rpc(
                    name=ctx.worker_name,
                    rank=ctx.global_rank,
                    world_size=ctx.global_world_size,
                    rpc_backend_options=options,
                )
        except RuntimeError as err:
            text = str(err)
            if "address already in use" in text.lower():
                raise RpcInitError(
                    f"RPC port {master_port} on {master_addr} is already in use: free it or "
                    "pick another port"
                ) from None
            if "timed out" in text.lower() or "timeout" in text.lower():
                raise RpcInitError(
                    f"{ctx.worker_name}: the RPC group at {master_addr}:{master_port} did not "
                    f"gather its {ctx.global_world_size} processes (every rank and its sampler "
                    f"processes) within {init_timeout_s:g} s: start every rank, or allow more "
                    "time (the loader's init_timeout=, a job's cluster.init_timeout_s) "
                    f"({_last_line(text)})"
                ) from None
            raise RpcInitError(
                f"{ctx.worker_name} could not join the RPC group at {master_addr}:{master_port} "
                f"(rank {ctx.global_rank}/{ctx.global_world_size}): {_last_line(text)}"
            ) from None
        rpc._set_rpc_timeout(timeout_s)
        _state.update(timeout=float(timeout_s), name=ctx.worker_name)
        log.info("%s joined the RPC group (%d processes)", ctx.worker_name, ctx.global_world_size)


def shutdown_rpc(
    id: Any = None, graceful: bool = True, timeout: float | None = None, *,
    graceful_timeout_s: float = 30.0,
) -> bool:  # fmt: skip
    """Leave the RPC group; True if every peer met the graceful barrier, False otherwise.

    The graceful barrier waits at most `graceful_timeout_s` (PyG's `timeout`) for every peer to
    arrive; if one is gone it fails and the agent is shut down locally. PyG's `id` is accepted
    (there is one group per process); a number in its place is the timeout (our older call).
    """
    if isinstance(id, int | float) and not isinstance(id, bool):
        graceful_timeout_s = float(id)
    if timeout is not None:
        graceful_timeout_s = float(timeout)
    return _shutdown(graceful=graceful, timeout_s=graceful_timeout_s)


def shutdown_rpc_now() -> bool:
    """Leave the RPC group without waiting for peers (after a failure)."""
    return _shutdown(graceful=False, timeout_s=10.0)


def _shutdown(graceful: bool, timeout_s: float) -> bool:
    """Run torch's shutdown in a helper thread so a stuck agent cannot block past ~2x timeout."""
    with _lock:
        if not is_initialized():
            return True
        outcome: dict[str, bool] = {}

        def _run() -> None:
            try:
                rpc.shutdown(graceful=graceful, timeout=timeout_s)
                outcome["ok"] = graceful
            except Exception as err:  # a peer is gone: the agent was still shut down locally
                log.warning("graceful RPC shutdown failed (%s)", _last_line(str(err)))
                outcome["ok"] = False

        worker = threading.Thread(target=_run, name="rpc-shutdown", daemon=True)
        worker.start()
        worker.join(2 * timeout_s + 5)
        _state["name"] = None
        if worker.is_alive():
            log.warning("RPC shutdown still blocked after %.0f s; leaving it", 2 * timeout_s + 5)
            return False
        return outcome.get("ok", False)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else text


def _remote_error(text: str) -> tuple[str, str] | None:
    """(exception type, message) of an exception raised on the peer, if `text` carries one.

    torch re-raises a remote exception locally with the text
    "On WorkerInfo(id=.., name=..):\nType('message')\nTraceback ...".
    """
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if "On WorkerInfo(" in line:
            head = lines[i + 1].strip()
            kind, _, rest = head.partition("(")
            return kind, rest[1:-2] if rest[:1] in "'\"" else rest[:-1]
    return None


def describe_failure(err: BaseException, peer: str, partition: int | None, timeout: float) -> str:
    """One line saying which peer failed, how, and why."""
    where = f"{peer}" + (f" (partition {partition})" if partition is not None else "")
    text = str(err)
    remote = _remote_error(text)
    if remote is not None:
        kind, msg = remote
        if kind == "PeerError":  # the peer itself lost one of ITS peers: name that one
            return f"{msg} (reported by {peer})"
        return f"{where} raised {kind}: {msg}"
    low = text.lower()
    if "timeout" in low or "timed out" in low or "ran for more than" in low:
        return f"{where} did not answer within {timeout:g} s: {_last_line(text)}"
    gone = ("eof", "connection", "pipe", "closed", "refused", "unknown destination", "shut")
    if any(g in low for g in gone):
        return f"{where} is gone: {_last_line(text)}"
    return f"{where} failed: {type(err).__name__}: {_last_line(text)}"


class PendingCall:
    """An in-flight RPC; `wait()` returns its value or raises `PeerError` naming the peer."""

    __slots__ = ("future", "peer", "partition", "timeout")

    def __init__(self, future: Any, peer: str, partition: int | None, timeout: float) -> None:
        self.future, self.peer, self.partition, self.timeout = future, peer, partition, timeout

    def wait(self) -> Any:
        try:
            return self.future.wait()
        except Exception as err:
            raise PeerError(
                describe_failure(err, self.peer, self.partition, self.timeout)
            ) from None


def call_async(
    peer: str,
    fn: Callable | str,
    args: Sequence[Any] = (),
    partition: int | None = None,
    timeout: float | None = None,
) -> PendingCall:
    """Start `fn(*args)` on `peer`; failures (even to start) surface at `wait()` as PeerError.

    `fn` is an endpoint name (see `endpoints`; what peers call each other by) or a function.

    `timeout` defaults to the job's RPC timeout; a call that itself makes calls (a whole batch)
    gets a longer one, so the inner failure — which names the real culprit — arrives first.
    """
    if not is_initialized() and not _agent_running():
        raise PeerError(f"RPC is not initialised in this process; cannot call {peer}")
    timeout = rpc_timeout() if timeout is None else timeout
    if isinstance(fn, str):
        fn, args = dispatch, (fn, *args)
    try:
        fut = rpc.rpc_async(peer, fn, args=tuple(args), timeout=timeout)
    except Exception as err:
        raise PeerError(describe_failure(err, peer, partition, timeout)) from None
    return PendingCall(fut, peer, partition, timeout)


def _agent_running() -> bool:
    """Whether torch's RPC agent runs although `init_rpc` here did not start it (a group
    joined with `torch.distributed.rpc.init_rpc` directly)."""
    try:
        rpc.get_worker_info()
        return True
    except RuntimeError:
        return False


class RPCRouter:
    """Partition id → the RPC workers holding it, chosen round-robin (thread-safe)."""

    def __init__(self, partition_to_workers: Sequence[Sequence[str]]) -> None:
        for part, workers in enumerate(partition_to_workers):
            if not workers:
                raise ValueError(f"partition {part} has no RPC worker to serve it")
        self.partition_to_workers = [list(w) for w in partition_to_workers]
        self._cycles = [itertools.cycle(w) for w in self.partition_to_workers]
        self._lock = threading.Lock()

    def get_to_worker(self, partition_idx: int) -> str:
        with self._lock:
            return next(self._cycles[partition_idx])

    @classmethod
    def for_context(cls, ctx: DistContext) -> RPCRouter:
        """Route to a node's sampler processes, or to its trainers when they sample in-process."""
        table = []
        for part in range(ctx.num_partitions):
            names = node_workers(part, ctx.procs_per_node, ctx.num_workers)
            samplers = [n for n in names if n.startswith("sampler")]
            table.append(samplers or names)
        return cls(table)


def call_partition(
    router: RPCRouter, partition: int, fn: Callable | str, args: Sequence[Any] = ()
) -> PendingCall:
    """Start `fn(*args)` on one of the workers holding `partition`."""
    return call_async(router.get_to_worker(partition), fn, args, partition)


# -- PyG's call registry and collectives ---------------------------------------------------------


def rpc_is_initialized() -> bool:
    """PyG's: whether this process's RPC agent runs."""
    return is_initialized() or _agent_running()


def _require_agent(what: str) -> None:
    if not rpc_is_initialized():
        raise RuntimeError(f"{what} needs RPC: call init_rpc(...) first")


def rpc_require_initialized(func: Callable) -> Callable:
    """PyG's decorator: `func` raises in one line unless this process's RPC agent runs."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _require_agent(func.__name__)
        return func(*args, **kwargs)

    return wrapper


def global_all_gather(obj: Any, timeout: float | None = None) -> dict[str, Any]:
    """PyG's: {worker name: obj} of every process of the group (blocks until all call it)."""
    _require_agent("global_all_gather")
    if timeout is None:
        return rpc.api._all_gather(obj)
    return rpc.api._all_gather(obj, timeout=timeout)


def global_barrier(timeout: float | None = None) -> None:
    """PyG's: wait for every process of the group; a failure is raised (PyG logs and goes on)."""
    global_all_gather(None, timeout)


def rpc_partition_to_workers(
    current_ctx: DistContext, num_partitions: int, current_partition_idx: int
) -> list[list[str]]:
    """PyG's: partition → names of the workers holding it, gathered from every process."""
    table: list[list[str]] = [[] for _ in range(num_partitions)]
    gathered = global_all_gather((str(current_ctx.role), num_partitions, current_partition_idx))
    for name, (_, _, idx) in gathered.items():
        table[idx].append(name)
    return table


class RPCCallBase(ABC):
    """PyG's base of a call registered with `rpc_register` (runs on the callee)."""

    @abstractmethod
    def rpc_sync(self, *args: Any, **kwargs: Any) -> Any: ...

    @abstractmethod
    def rpc_async(self, *args: Any, **kwargs: Any) -> Any: ...


_calls: dict[int, RPCCallBase] = {}
_calls_lock = threading.Lock()


def rpc_register(call: RPCCallBase) -> int:
    """PyG's: register `call`; its id is the same on every process that registers the same calls
    in the same order (PyG's contract)."""
    _require_agent("rpc_register")
    with _calls_lock:
        call_id = len(_calls)
        _calls[call_id] = call
    return call_id


def _registered(call_id: int) -> RPCCallBase:
    call = _calls.get(call_id)
    if call is None:
        raise RuntimeError(f"no RPC call registered with id {call_id} here ({len(_calls)} are)")
    return call


def _run_async(call_id: int, *args: Any, **kwargs: Any) -> Any:
    return _registered(call_id).rpc_async(*args, **kwargs)


def _run_sync(call_id: int, *args: Any, **kwargs: Any) -> Any:
    return _registered(call_id).rpc_sync(*args, **kwargs)


def rpc_async(worker_name: str, call_id: int, args: Any = None, kwargs: Any = None) -> Any:
    """PyG's: start registered call `call_id` on `worker_name`; a torch Future."""
    _require_agent("rpc_async")
    return rpc.rpc_async(worker_name, _run_async, args=(call_id, *(args or ())), kwargs=kwargs)


def rpc_sync(worker_name: str, call_id: int, args: Any = None, kwargs: Any = None) -> Any:
    """PyG's: run registered call `call_id` on `worker_name` and return its result."""
    _require_agent("rpc_sync")
    fut = rpc.rpc_async(worker_name, _run_sync, args=(call_id, *(args or ())), kwargs=kwargs)
    return fut.wait()
