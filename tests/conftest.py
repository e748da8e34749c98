"""Shared fixtures: Hydra composition of the project's configs, repo paths."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable

# Tests run on 2 shared cores: one intra-op thread per process keeps runs predictable.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def compose():
    """compose(overrides) -> validated Config, through the same files as `python -m app`."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from app.config import register_configs, to_config

    register_configs()

    def _compose(*overrides: str):
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            return to_config(hydra_compose(config_name="config", overrides=list(overrides)))

    return _compose


def run_app(*args: str, timeout: float = 60, env: dict | None = None, cwd: Path = REPO):
    """Run `python -m app ARGS` as a real process; returns the CompletedProcess."""
    import subprocess

    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [PYTHON, "-m", "app", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
