"""Shared fixtures (Hydra composition of the project's configs), and the rule that keeps
`make test-fast` free of processes: a test that starts one must be marked `dist`.

The rule is enforced, not trusted: while a test not marked `dist` sets up and runs, every way
Python starts a process (subprocess, multiprocessing and torch.multiprocessing, os.fork,
os.posix_spawn, os.system) is refused with `UnmarkedSpawn`, and the test fails naming what it
tried to start, even where its code swallowed the error. Helpers live in tests/helpers; test
modules import from there, never from one another.
"""

from __future__ import annotations

import _posixsubprocess
import functools
import os
import platform
import subprocess

import pytest

from tests.helpers.jobs import REPO

# Tests run on 2 shared cores: one intra-op thread per process keeps runs predictable.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Tests write only under temporary dirs: a run dir that appears in the project's own
# outputs/ during the session (a job started without `output_dir=`) fails the session.
PROJECT_RUN_DIRS = (REPO / "outputs" / "runs", REPO / "outputs" / "multirun")
_RUNS_BEFORE = pytest.StashKey[set]()


def _project_runs() -> set[str]:
    return {str(p) for d in PROJECT_RUN_DIRS if d.is_dir() for p in d.iterdir()}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.stash[_RUNS_BEFORE] = _project_runs()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    new = sorted(_project_runs() - session.stash.get(_RUNS_BEFORE, set()))
    if new:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        reporter.write("\n")
        reporter.write_sep("=", "tests wrote into the project's outputs/ (give output_dir=)")
        reporter.write_line(" ".join(new))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def compose():
    """compose(*overrides) -> validated Config, through the same files as `python -m app`."""
    from app.config import compose_config

    return lambda *overrides: compose_config(list(overrides))


_refusing = False  # while a test not marked `dist` sets up or runs
_started: list[str] = []  # what it tried to start


class UnmarkedSpawn(RuntimeError):
    """A test not marked `dist` tried to start a process (noted too: a caught one still fails)."""


def _argv(args) -> str:
    return " ".join(os.fsdecode(a) for a in args or ())[:200]


def _watched(start, describe):
    """`start`, refused (noting `describe(*args)`) while a test not marked `dist` runs."""

    @functools.wraps(start)
    def watched(*args, **kwargs):
        if _refusing:
            _started.append(describe(*args))
            raise UnmarkedSpawn(f"{_started[-1]}: a test that starts processes is marked `dist`")
        return start(*args, **kwargs)

    return watched


# Python asks `uname -p` once per process for platform.processor() (mlflow does, at import):
# asked here, before the guard, importing mlflow in a test starts nothing.
platform.processor()
# subprocess binds its fork_exec at import; multiprocessing's spawn and forkserver look it up
subprocess._fork_exec = _watched(subprocess._fork_exec, lambda argv, *_: _argv(argv))
_posixsubprocess.fork_exec = _watched(_posixsubprocess.fork_exec, lambda argv, *_: _argv(argv))
os.fork = _watched(os.fork, lambda: "os.fork() (multiprocessing's fork start method?)")
os.forkpty = _watched(os.forkpty, lambda: "os.forkpty()")
os.system = _watched(os.system, lambda cmd: f"os.system({cmd!r})")
os.posix_spawn = _watched(os.posix_spawn, lambda path, argv, *_: _argv(argv))
os.posix_spawnp = _watched(os.posix_spawnp, lambda path, argv, *_: _argv(argv))


def _refuse_unless_dist(item):
    """Around a test's setup or call. Teardown is left alone: a session fixture's cleanup (the
    hosts' testbed) may run in the teardown of whichever test came last."""
    global _refusing
    _refusing = item.get_closest_marker("dist") is None
    try:
        return (yield)
    finally:
        _refusing = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _refuse_unless_dist(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _refuse_unless_dist(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Fail the setup or call of a test not marked `dist` that tried to start a process."""
    report = yield
    if _started:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} tried to start a process in its {call.when} "
            f"(first: {_started[0]}) but is not marked `dist`: mark it @pytest.mark.dist (and "
            "`long` past ~30 s): `make test-fast` starts no process (docs/testing.md)"
        )
        _started.clear()
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Name a failing test the moment it fails, not only in the summary at the end: a long
    run stopped early (CI's time limit, a killed machine) still says what failed."""
    if report.failed:
        reporter = _reporter.get("terminal")
        if reporter is not None:
            reporter.write_line(f"\nFAILED {report.nodeid} ({report.when})", red=True, bold=True)


_reporter: dict[str, object] = {}


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    _reporter["terminal"] = config.pluginmanager.get_plugin("terminalreporter")
