"""The `distgnn` console script ([project.scripts]) runs the same CLI as `python -m app`."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.helpers.jobs import PYTHON, REPO


def _script(*args: str, cwd) -> subprocess.CompletedProcess:
    """What pip's generated `distgnn` wrapper does: import the entry point, call it."""
    section = (REPO / "pyproject.toml").read_text().split("[project.scripts]", 1)[1]
    module, func = re.search(r'^distgnn = "([\w.]+):(\w+)"', section, re.M).groups()
    code = (
        f"import sys; sys.argv = ['distgnn', *sys.argv[1:]]; from {module} import {func}; {func}()"
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'launchers'}"}
    return subprocess.run(
        [PYTHON, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.dist
def test_script_composes_configs_from_any_directory(tmp_path):
    proc = _script("+experiment=smoke", "--cfg", "job", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "experiment: smoke" in proc.stdout


@pytest.mark.dist
def test_script_has_the_report_subcommand(tmp_path):
    proc = _script("report", "--help", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: python -m app report")
