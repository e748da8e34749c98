"""`make clean` removes outputs and says what it keeps; `make clean-data` removes the datasets.

Run on a copy of the Makefile in a temporary project, never on this checkout's own files.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.helpers.jobs import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _make(project, target: str) -> str:
    proc = subprocess.run(
        ["make", "--no-print-directory", target],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.dist
def test_clean_keeps_data_and_venv_and_says_so_then_clean_data_removes_data(tmp_path):
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    for path in ("outputs/runs/r1/result.json", "outputs/mlflow.db", "data/ds/data.pt"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x" * 2048)
    (tmp_path / ".venv").mkdir()

    out = _make(tmp_path, "clean")
    assert [p.name for p in (tmp_path / "outputs").iterdir()] == [".gitkeep"]
    assert (tmp_path / "data/ds/data.pt").exists() and (tmp_path / ".venv").is_dir()
    assert "kept data/ (" in out and "make clean-data removes them) and .venv" in out

    _make(tmp_path, "clean-data")
    assert not (tmp_path / "data").exists() and (tmp_path / ".venv").is_dir()
    assert "kept .venv (no data/ to keep)" in _make(tmp_path, "clean")
