"""`python -m app experiment=NAME [overrides]`: compose, validate, dispatch.

User errors (bad config, unusable partition, full disk) end in one line and a non-zero exit;
Ctrl-C exits 130 and SIGTERM 143, after every child was stopped, without a traceback.
`python -m app report ...` (also `distgnn report ...`) prints results tables instead:
app/tracking/report.py.
"""

from __future__ import annotations

import os
import signal
import sys

from app.jit import watch_compiles
from app.launch.interrupt import TERMINATED, say_outcome, stop_line

EXIT_CONFIG = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM
_armed = False  # set once `run_cli` can turn SIGTERM into an orderly stop


def _on_sigterm(signum: int, frame: object) -> None:
    if not _armed:  # still importing: nothing started yet, nothing to clean up
        sys.stderr.write("terminated (SIGTERM) before the job started\n")
        os._exit(EXIT_TERMINATED)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a repeat must not cut the cleanup
    TERMINATED.set()  # checked again before any child starts (app.launch.interrupt)
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":  # first: the imports below take seconds on a busy host
    signal.signal(signal.SIGTERM, _on_sigterm)

import errno  # noqa: E402
import logging  # noqa: E402

import hydra  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from app.config import (  # noqa: E402
    CONF_DIR,
    ConfigError,
    check_overrides,
    normalize_overrides,
    register_configs,
    to_config,
)

register_configs()
log = logging.getLogger("distgnn")


def _sweep_direction(monitor: str, objective: str) -> str:
    from app.tracking.summary import sweep_direction

    return sweep_direction(str(monitor or ""), str(objective))


# `hydra/sweeper=optuna` (conf/hydra/sweeper/optuna.yaml): the study's direction from the monitor
OmegaConf.register_new_resolver("distgnn_direction", _sweep_direction, replace=True)


def _in_sweep() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _fail(kind: str, err: BaseException, code: int, *, refused: bool = False) -> None:
    """One line and exit; in a `-m` sweep the job fails alone (the sweep goes on).

    `refused`: the job was turned away before it started, so its run dir holds nothing but
    Hydra's own files and is removed (`app.rundir.remove_unused_run_dir`).
    """
    if _in_sweep() and not isinstance(err, ConfigError):
        raise err
    if refused:
        from app.run import job_dir
        from app.rundir import remove_unused_run_dir

        remove_unused_run_dir(job_dir())
    lines = str(err).splitlines() or [""]  # several problems: one line each
    # a failed job's line: already said by `run_job`
    say_outcome(err, "\n".join(f"{kind}: {line}" for line in lines))
    sys.exit(code)


def _fail_unexpected(err: Exception) -> None:
    """Any other error: one line (its type and message, where the traceback went), the
    traceback in `<job dir>/traceback.log`; in a sweep the job fails alone."""
    from app.run import job_dir
    from app.rundir import write_traceback

    path = write_traceback(job_dir(), err)
    if _in_sweep():
        raise err
    first = (str(err).strip().splitlines() or [""])[0]
    print(f"error: {type(err).__name__}: {first} (traceback: {path})", file=sys.stderr, flush=True)
    sys.exit(1)


def _say(line: str) -> None:
    print(line, flush=True)


# An absolute config dir: found the same way from `python -m app` and the `distgnn` script.
@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(node: DictConfig) -> float | None:
    try:
        cfg = to_config(node)
    except ConfigError as err:
        _fail("config error", err, EXIT_CONFIG, refused=True)
    from app.dataset.files import DataMissingError, precheck

    try:  # OGB or the user's files missing: one line, before any work (and importing torch)
        precheck(cfg.dataset)
    except DataMissingError as err:
        _fail("data error", err, EXIT_CONFIG, refused=True)
    # Imported only now: a config or data error above never pays for importing torch.
    from app.tracking.progress import TICK_S, ticking

    loading = f"{cfg.task} {cfg.experiment or 'job'}: loading torch and the job's modules"
    _say(loading)  # the console's, not the run dir's log: a refused job leaves no run dir
    with ticking(loading, TICK_S, _say):  # tens of seconds on a busy machine: say so
        from app.launch import JobFailed, partition_lock, partitions_dir
        from app.launch.limits import check_before_work
        from app.launch.precheck import check_ports_before_work
        from app.partition.reader import PartitionError
        from app.partition.spec import PartitionSpec
        from app.run import run_task

    spec = PartitionSpec.from_config(cfg)
    watch_compiles()  # a cold kernel cache: say so, not a silent minute
    try:
        check_ports_before_work(cfg.cluster, cfg.task)  # before any data work, no run dir left
        check_before_work(cfg, spec)
    except ConfigError as err:
        _fail("config error", err, EXIT_CONFIG, refused=True)
    try:
        if cfg.task != "partition":
            return run_task(cfg)
        from app.launch.precheck import check_partition_root, disk_full_as_one_line

        with partition_lock(spec):  # a concurrent job partitioning the same data: wait for it
            check_partition_root(spec)
            with disk_full_as_one_line(partitions_dir(spec)):
                return run_task(cfg)
    except ConfigError as err:
        _fail("config error", err, EXIT_CONFIG)
    except PartitionError as err:
        _fail("partition error", err, 1)
    except JobFailed as err:  # the culprit's error line and log: no launcher traceback
        _fail("job failed", err, 1)
    except OSError as err:
        if err.errno != errno.ENOSPC:
            _fail_unexpected(err)
        _fail("error", err.strerror or err, 1)
    except Exception as err:
        _fail_unexpected(err)
    return None


def _cfg_job_requested(argv: list[str]) -> bool:
    """`--cfg job|all` (or `-c`): Hydra prints the config without calling `main`."""
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag in ("--cfg", "-c") and value in ("job", "all"):
            return True
    return any(a in ("--cfg=job", "--cfg=all") for a in argv)


def validate_printed_config(argv: list[str]) -> None:
    """Run the cross-field validation that `--cfg job` would otherwise skip."""
    from app.config import compose_config

    overrides = [a for a in argv if "=" in a and not a.startswith(("-", "hydra"))]
    compose_config(overrides)


def _exit_terminated(signum: int, frame: object) -> None:
    """SIGTERM once the job is over (interpreter shutdown): nothing is left to stop, so exit
    143 at once; a KeyboardInterrupt raised there would escape and exit -2 (by SIGINT)."""
    os._exit(EXIT_TERMINATED)


def run_cli(argv: list[str]) -> None:
    global _armed
    try:
        _armed = True
        if normalize_overrides(argv) != argv:  # `main` (Hydra) parses sys.argv
            argv = sys.argv[1:] = normalize_overrides(argv)
        check_overrides(argv)
        if _cfg_job_requested(argv) and not {"-m", "--multirun"} & set(argv):
            validate_printed_config(argv)
        main()
    except ConfigError as err:
        _fail("config error", err, EXIT_CONFIG)
    except KeyboardInterrupt as err:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not cut this short
            signal.signal(sig, signal.SIG_IGN)
        terminated = bool(err.args) and err.args[0] == f"signal {signal.SIGTERM}"
        say_outcome(err, stop_line(err))  # said already by `run_job` when a job was stopped
        sys.exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED)
    finally:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:  # not already stopping
            signal.signal(signal.SIGTERM, _exit_terminated)


def cli() -> None:
    """`python -m app ...` and the `distgnn` console script."""
    if signal.getsignal(signal.SIGTERM) is not _on_sigterm:  # the console script starts here
        signal.signal(signal.SIGTERM, _on_sigterm)
    if sys.argv[1:2] in (["--help"], ["-h"]):
        from app.cli_help import help_text

        print(help_text(CONF_DIR), end="")
        sys.exit(0)
    if sys.argv[1:2] == ["report"]:  # reads the MLflow store: not a Hydra run
        from app.tracking.report import main as report

        sys.exit(report(sys.argv[2:]))
    run_cli(sys.argv[1:])


if __name__ == "__main__":
    cli()
