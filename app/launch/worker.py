"""`python -m app.launch.worker`: the main of every process a job's launcher starts.

Identity comes from `Runtime.from_env()` (set once by the launcher), the config from the file
the launcher wrote. Dispatch by role: a sampler serves its partition over RPC until the job
shuts down; a trainer trains. Each role's main is named by `app.launch.plan.ROLE_MAINS` as a
`module:function` string, so the launcher imports nothing from the rooms above it. Output goes to stdout/stderr, which the launcher copies
into `<job_dir>/logs/<name>.log`; on failure the full traceback is logged and the last line is
a one-line error, so the launcher's `JobFailed` shows it. SIGTERM becomes KeyboardInterrupt
so `finally` blocks (RPC, process group, MLflow run) still run; SIGINT means what SIGTERM
means (whatever handler the role installed for SIGTERM runs), so a Ctrl-C sent to one child
stops it as fast as SIGTERM would. The process always ends in `os._exit`, even when its
stdout is gone (a flush raising BrokenPipeError must not leave it to a stuck RPC thread).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback

from app.jit import watch_compiles
from app.launch.heartbeat import start_heartbeat
from app.netutil import route_ifname_env
from app.runtime import Runtime

log = logging.getLogger("distgnn")

EXIT_ERROR = 1
ERROR_MARK = ": error: "  # `trainer0-0: error: ValueError: bad`: the launcher's culprit line
EXIT_TERMINATED = 128 + signal.SIGTERM


def _on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _sigint_as_sigterm(signum: int, frame: object) -> None:
    """SIGINT: call the SIGTERM handler in force now (a sampler's stops it at once)."""
    handler = signal.getsignal(signal.SIGTERM)
    if callable(handler):
        handler(signal.SIGTERM, frame)
    else:
        raise KeyboardInterrupt(f"signal {signal.SIGTERM}")


def setup_logging(runtime: Runtime) -> None:
    """Rank-prefixed records on stderr only: the launcher already files them under logs/."""
    from app.tracking.logging import setup_logging as setup_ranked

    setup_ranked(runtime.name)


def run(runtime: Runtime) -> int:
    """Load the job's config and run this process's role; return the exit code."""
    from app.config import load_config
    from app.entrypoint import resolve
    from app.launch.plan import ROLE_MAINS

    cfg = load_config(runtime.config_path)
    if runtime.role not in ROLE_MAINS:
        raise ValueError(f"DISTGNN_ROLE={runtime.role!r}: expected one of {', '.join(ROLE_MAINS)}")
    return resolve(ROLE_MAINS[runtime.role])(runtime, cfg)


def main() -> int:
    start_heartbeat()  # first: the launcher counts silence from this process's start
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, _sigint_as_sigterm)
    try:
        runtime = Runtime.from_env()
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    for key, value in route_ifname_env(runtime.master_addr).items():
        os.environ.setdefault(key, value)  # before torch: data sockets on this host's address
    setup_logging(runtime)
    watch_compiles()  # the launcher warmed the kernel cache: a compile here is announced
    try:
        return run(runtime)
    except KeyboardInterrupt:
        print(f"{runtime.name}: stopped by signal", file=sys.stderr, flush=True)
        return EXIT_TERMINATED
    except Exception as err:
        traceback.print_exc(file=sys.stderr)
        first = (str(err).strip().splitlines() or [""])[0]  # the launcher's one-line culprit
        print(
            f"{runtime.name}{ERROR_MARK}{type(err).__name__}: {first}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_ERROR


def _exit(code: int) -> None:
    """Flush what can be flushed, then `os._exit(code)` whatever the flushes raise."""
    for flush in (logging.shutdown, sys.stdout.flush, sys.stderr.flush):
        try:
            flush()
        except BaseException:  # noqa: BLE001 (BrokenPipeError, a closed stream: exit anyway)
            pass
    os._exit(code)  # no interpreter teardown: a stuck RPC/agent thread must not keep us alive


if __name__ == "__main__":
    exit_code = EXIT_ERROR
    try:
        exit_code = main()
    finally:
        _exit(exit_code)
