"""A refused job leaves no run dir; an unexpected error leaves its traceback in it."""

from __future__ import annotations

import pytest

from app.rundir import remove_unused_run_dir, write_traceback
from tests.helpers.jobs import run_app


def test_run_dir_with_only_hydra_files_is_removed_with_its_empty_parent(tmp_path):
    run = tmp_path / "runs" / "2026-01-01_00-00-00-abc"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("a: 1")
    (run / "__main__.log").write_text("")
    assert remove_unused_run_dir(run)
    assert not (tmp_path / "runs").exists()


def test_run_dir_with_output_is_kept(tmp_path):
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "trainer0-0.log").write_text("[trainer0-0] started\n")
    assert not remove_unused_run_dir(run)
    assert (run / "logs" / "trainer0-0.log").exists()


def test_traceback_goes_to_the_run_dir(tmp_path):
    try:
        raise KeyError("x")
    except KeyError as err:
        path = write_traceback(tmp_path, err)
    assert path == tmp_path / "traceback.log"
    assert "Traceback (most recent call last)" in path.read_text()


@pytest.mark.dist
def test_cross_field_error_leaves_no_run_dir(tmp_path):
    proc = run_app(
        "+experiment=smoke", "cluster.num_nodes=2", "partition.num_parts=3",
        f"output_dir={tmp_path}", timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("config error: partition.num_parts=3")
    assert list(tmp_path.iterdir()) == []
