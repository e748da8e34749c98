"""Sampler processes: their main, who starts and stops them, and a trainer's teardown.

One main, two starters. `run_sampler` is the sampler process: load the node's partition
(memory-mapped), join RPC, answer requests (the endpoints in `server`) until its trainer says
stop (or is gone, or SIGTERM / SIGINT: then at once), leave RPC, exit. The launcher starts it
as a process of the job (`app.launch.worker` → `serve`, named in `app.launch.plan.ROLE_MAINS`);
a hand-launched PyG-style script's loader starts its own (`join`: forked from a clean fork
server, `forkserver`, never from the script itself), and stops them when the last loader using
them is closed, garbage-collected, or the interpreter exits (atexit) — never an orphan: a
sampler also leaves by itself once its trainer stops answering pings or its fork server ends.

`shutdown(ctx)` is a trainer's teardown: stop its samplers, then leave RPC (graceful: every
process of the group meets at a bounded barrier, so no peer sees a broken pipe).
"""

from __future__ import annotations

import atexit
import logging
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from app.config import Config
from app.distributed import rpc, server, shm
from app.distributed.context import DistContext
from app.distributed.forkserver import ForkServer, SamplerProcess
from app.runtime import Runtime, tune_process, worker_name

log = logging.getLogger("distgnn")

PING_EVERY_S = 2.0
JOIN_GRACE_S = 10.0  # after RPC is down, how long a sampler process gets to exit on its own
POLL_S = 0.2  # how often a start-up wait looks at its sampler processes (and lets Ctrl-C in)


# -- the sampler process ------------------------------------------------------------------------


def _trainer_alive(trainer: str) -> bool:
    try:
        rpc.call_async(trainer, "ping").wait()
        return True
    except rpc.PeerError as err:
        log.error("stopping: %s", err)
        return False


def run_sampler(
    ctx: DistContext,
    partition_root: str,
    master_addr: str,
    rpc_port: int,
    rpc_timeout_s: float,
    init_timeout_s: float,
    put: dict[tuple[Any, str], Tensor] | None = None,
) -> int:
    """Sampler-process main: serve partition `ctx.partition_idx` until told to stop; exit code.

    `ctx` is the sampler's derived context (`DistContext.from_runtime` or `.sampler(w)`);
    `put`: tensors the script put into its feature store, (group, name) → tensor, put into
    this process's store too (PyG's forked workers inherit them).
    """
    # Until it serves, SIGTERM / SIGINT end it at once: loading and joining block in C++,
    # where a Python handler would not run before the start-up timeout.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    log.info("%s: %s", ctx.worker_name, tune_process("sampler"))
    shm.remove_orphans()
    fs, gs = server.load_stores(partition_root, ctx.partition_idx)
    for (group, name), tensor in (put or {}).items():
        fs.put_attr(tensor, group, name)
    server.register(fs, gs, rpc.RPCRouter.for_context(ctx))
    stop, failed = server._stop, threading.Event()  # `stop` is set by the "stop" endpoint
    rpc.init_rpc(ctx, master_addr, rpc_port, timeout_s=rpc_timeout_s, init_timeout_s=init_timeout_s)

    def _on_term(*_: Any) -> None:
        failed.set()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):  # SIGINT means what SIGTERM means: stop now
        signal.signal(sig, _on_term)
    trainer = worker_name("trainer", ctx.partition_idx, ctx.local_rank)
    try:
        while not stop.wait(PING_EVERY_S):
            if not _trainer_alive(trainer):
                failed.set()
                break
    finally:
        graceful = 0.0 if failed.is_set() else init_timeout_s
        clean = (
            rpc.shutdown_rpc(graceful_timeout_s=graceful) if graceful else rpc.shutdown_rpc_now()
        )
        shm.remove_own()
    log.info(
        "%s: served partition %d, exiting (%s)",
        ctx.worker_name,
        ctx.partition_idx,
        "clean" if clean and not failed.is_set() else "after a failure",
    )
    return 1 if failed.is_set() else 0


def serve(runtime: Runtime, cfg: Config) -> int:
    """The sampler role's main (`app.launch.plan.ROLE_MAINS`): `run_sampler` with the identity
    of a launcher-started process (its `Runtime`)."""
    return run_sampler(
        DistContext.from_runtime(runtime),
        runtime.partition_root,
        runtime.master_addr,
        runtime.rpc_port,
        cfg.sampler.rpc_timeout_s,
        cfg.cluster.init_timeout_s,
    )


def sampler_main(ctx: DistContext, *args: Any) -> None:
    """Entry of a sampler process a loader started (forked by its `ForkServer`): logging, then
    `run_sampler`, then exit without interpreter teardown (a stuck RPC thread must not keep
    it alive)."""
    import os

    from app.tracking.logging import setup_logging

    setup_logging(ctx.worker_name)
    code = 1
    try:
        code = run_sampler(ctx, *args)
    except Exception as err:
        log.error("%s: error: %s: %s", ctx.worker_name, type(err).__name__, err)
    finally:
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)


def set_threads(num_threads: int) -> int:
    """Torch / numba threads of this process (`enable_multithreading`, called by RPC)."""
    import torch

    torch.set_num_threads(num_threads)
    try:
        import numba

        numba.set_num_threads(min(num_threads, numba.config.NUMBA_NUM_THREADS))
    except (ImportError, ValueError):
        pass
    return torch.get_num_threads()


# -- teardown -----------------------------------------------------------------------------------


def stop_samplers(ctx: DistContext) -> None:
    """Tell this trainer's sampler processes to leave (best effort: a dead one is skipped)."""
    calls = [
        rpc.call_async(worker_name("sampler", ctx.partition_idx, ctx.local_rank, w), "stop")
        for w in range(ctx.num_workers)
    ]
    for call in calls:
        try:
            call.wait()
        except rpc.PeerError as err:
            log.warning("could not stop sampler: %s", err)


def shutdown(ctx: DistContext, graceful_timeout_s: float = 120.0, failed: bool = False) -> bool:
    """Trainer-side teardown: stop own samplers, then leave RPC (at once if the job failed)."""
    if not rpc.is_initialized():
        return True
    if failed:
        clean = rpc.shutdown_rpc_now()
        shm.remove_orphans()
        return clean
    if ctx.role == "trainer":
        stop_samplers(ctx)
    return rpc.shutdown_rpc(graceful_timeout_s=graceful_timeout_s)


# -- a hand-launched script's RPC membership and sampler processes ------------------------------


@dataclass
class Group:
    """This process's RPC membership as a loader formed it (no launcher): the derived context,
    the fork server and the sampler processes it started, how many open loaders use it."""

    ctx: DistContext
    init_timeout_s: float
    forks: ForkServer | None = None
    procs: list[SamplerProcess] = field(default_factory=list)
    users: int = 0
    closed: bool = False
    put: frozenset[tuple[Any, str]] = frozenset()  # what its samplers were given (`join`)


_lock = threading.Lock()
_current: dict[str, Group] = {}


def join(
    ctx: DistContext,
    partition_root: str | None,
    master_addr: str,
    master_port: int,
    rpc_timeout_s: float,
    init_timeout_s: float,
    num_rpc_threads: int,
    put: dict[tuple[Any, str], Tensor] | None = None,
) -> Group:
    """Join the RPC group for a loader of a hand-launched script, starting `ctx.num_workers`
    sampler processes first (they are members too, given the tensors `put` into the script's
    feature store); later loaders reuse the group."""
    put = put or {}
    with _lock:
        group = _current.get("group")
        if group is not None and not group.closed:
            if group.ctx.num_workers != ctx.num_workers:
                raise ValueError(
                    f"num_workers={ctx.num_workers}: this process already runs "
                    f"{group.ctx.num_workers} sampler processes for an earlier loader; pass "
                    f"num_workers={group.ctx.num_workers} to every loader of a process"
                )
            late = sorted(str(k) for k in set(put) - group.put) if ctx.num_workers else []
            if late:
                raise ValueError(
                    f"{', '.join(late)} put into the feature store after the first loader "
                    "started its sampler processes, which do not have it: put every tensor "
                    "before building the first loader"
                )
            group.users += 1
            return group
        if rpc.is_initialized():
            raise ValueError(
                f"RPC is already initialised in this process as {rpc.current_name()}: pass a "
                "DistContext from the same launcher (with its name), or let the loader join RPC"
            )
        if ctx.num_workers and partition_root is None:
            raise ValueError(
                f"num_workers={ctx.num_workers} needs stores loaded from a partition folder "
                "(LocalGraphStore/LocalFeatureStore.from_partition): sampler processes load it"
            )
        group = Group(ctx, init_timeout_s, put=frozenset(put))
        try:
            _start_samplers(
                group,
                (str(partition_root), master_addr, master_port, rpc_timeout_s, init_timeout_s, put),
            )
            _init_rpc_watching(group, master_addr, master_port, num_rpc_threads, rpc_timeout_s)
        except BaseException:
            _reap(group, 0.0)
            raise
        group.users = 1
        _current["group"] = group
        if not _current.get("atexit"):
            atexit.register(_at_exit)
            _current["atexit"] = group
        return group


def _start_samplers(group: Group, args: tuple) -> None:
    """Fork `group.ctx.num_workers` samplers from a fresh fork server (`forkserver`): never
    from this process, whose OpenMP pool a fork would inherit in whatever state it is in."""
    if not group.ctx.num_workers:
        return
    group.forks = ForkServer(preload=__name__)
    for w in range(group.ctx.num_workers):
        sctx = group.ctx.sampler(w)
        target = f"{__name__}:{sampler_main.__name__}"
        group.procs.append(group.forks.start(sctx.name, target, (sctx, *args)))


def _init_rpc_watching(
    group: Group, master_addr: str, master_port: int, threads: int, rpc_timeout_s: float
) -> None:
    """`rpc.init_rpc` in a helper thread, watched from this one: Ctrl-C interrupts the wait,
    and a sampler process that dies during start-up fails the join at once, by name, instead
    of at the start-up timeout."""
    outcome: list[BaseException | None] = []

    def _run() -> None:
        try:
            rpc.init_rpc(
                group.ctx,
                master_addr,
                master_port,
                threads,
                timeout_s=rpc_timeout_s,
                init_timeout_s=group.init_timeout_s,
            )
            outcome.append(None)
        except BaseException as err:  # handed to the waiting thread
            outcome.append(err)

    waiter = threading.Thread(target=_run, name="distgnn-rpc-join", daemon=True)
    waiter.start()
    while waiter.is_alive():
        waiter.join(POLL_S)
        dead = [p.name for p in group.procs if not p.is_alive()]
        if dead and waiter.is_alive():
            raise rpc.RpcInitError(
                f"sampler process {dead[0]} exited while the RPC group was forming: see its "
                "lines above"
            )
    if outcome and outcome[0] is not None:
        raise outcome[0]


def leave(group: Group | None) -> None:
    """A loader is done with `group`; the last one out stops the samplers and leaves RPC."""
    if group is None:
        return
    with _lock:
        group.users -= 1
        if group.users > 0 or group.closed:
            return
        _close(group, failed=False)


def _close(group: Group, failed: bool) -> None:
    group.closed = True
    shutdown(group.ctx, group.init_timeout_s, failed)
    _reap(group, JOIN_GRACE_S)


def _reap(group: Group, grace_s: float) -> None:
    """Wait for the sampler processes, terminate (and kill) any still running, then end the
    fork server."""
    for proc in group.procs:
        proc.join(grace_s)
    for proc in group.procs:
        if proc.is_alive():
            if grace_s:  # with no grace (a failed start-up) ending them is the plan, not news
                log.warning("sampler process %s did not exit; terminating it", proc.name)
            proc.terminate()
            proc.join(5.0)
            if proc.is_alive():
                proc.kill()
                proc.join(5.0)
    if group.forks is not None:
        group.forks.close()
    if group.procs:
        shm.remove_orphans()


def _at_exit() -> None:
    """Interpreter exit with loaders still open: tear the group down (at once after an error)."""
    group = _current.get("group")
    if group is not None and not group.closed:
        _close(group, failed=hasattr(sys, "last_type"))
