"""The suite's own rules: test modules import shared code from tests/helpers only, never from
another test module or a conftest; and the conftest guard fails a test that starts a process
without the `dist` marker (so `make test-fast` starts none), naming what it started."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers.jobs import PYTHON, REPO

TESTS = REPO / "tests"
IMPORT = re.compile(r"^\s*(?:from|import)\s+(tests(?:\.\w+)*)", re.M)  # lazy imports too


def foreign_imports(text: str, own: str) -> list[str]:
    """The `tests.*` modules `text` (module `own`) imports other than tests.helpers and itself."""
    return [
        name
        for name in IMPORT.findall(text)
        if name not in (own, "tests", "tests.helpers") and not name.startswith("tests.helpers.")
    ]


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def test_test_modules_import_only_helpers():
    bad = {
        _module(p): names
        for p in sorted(TESTS.rglob("*.py"))
        if (names := foreign_imports(p.read_text(), _module(p)))
    }
    assert bad == {}, "import shared code from tests/helpers, not from a test module or conftest"


def test_the_import_rule_sees_test_module_and_conftest_imports():
    text = (
        "from tests.helpers.jobs import REPO\n"
        "from tests.conftest import run_app\n"
        "def f():\n"
        "    from tests.unit.test_model import batch\n"
        "    from tests.unit.test_self import helper\n"
    )
    got = foreign_imports(text, "tests.unit.test_self")
    assert got == ["tests.conftest", "tests.unit.test_model"]


SPAWNING = """
import multiprocessing
import subprocess

import pytest


def test_quiet():
    assert sum(range(4)) == 6


def test_runs_a_command():
    subprocess.run(["true"], check=True)


def test_starts_a_spawned_process():
    p = multiprocessing.get_context("spawn").Process(target=print)
    p.start()
    p.join()


@pytest.fixture
def server():
    proc = subprocess.Popen(["sleep", "0"])
    yield proc
    proc.wait()


def test_uses_a_fixture_that_starts_one(server):
    assert server.pid > 0


@pytest.mark.dist
def test_marked(server):
    subprocess.run(["true"], check=True)
"""


@pytest.mark.dist  # it runs pytest on a module whose tests start processes
def test_the_guard_fails_unmarked_tests_that_start_processes(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    dist: starts processes\n")
    (tmp_path / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    (tmp_path / "test_spawning.py").write_text(SPAWNING)
    proc = subprocess.run(
        [PYTHON, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "test_spawning.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = proc.stdout
    outcome = {name: result for result, name in re.findall(
        r"^(PASSED|FAILED|ERROR) test_spawning\.py::(\w+)", out, re.M)}  # fmt: skip
    assert outcome == {
        "test_quiet": "PASSED",
        "test_runs_a_command": "FAILED",
        "test_starts_a_spawned_process": "FAILED",
        "test_uses_a_fixture_that_starts_one": "ERROR",
        "test_marked": "PASSED",
    }, out[-3000:]
    assert "test_runs_a_command tried to start a process in its call (first: true)" in out
    assert "is not marked `dist`: mark it @pytest.mark.dist" in out
