"""A full disk under any of a job's writers is one line naming the file and the free space
(issue 28 #8), on a real, small tmpfs: a checkpoint (torch.save's errno-less "[enforce fail at
inline_container.cc...]" before), result.json and the other atomic text files, the MLflow
SQLite store (~150 lines of SQLAlchemy before)."""

from __future__ import annotations

import re

import pytest
import torch

from app.fsutil import DiskFullError, write_text_atomic
from app.train.checkpoint import save_checkpoint
from tests.helpers.disk import small_disk
from tests.helpers.jobs import REPO

ONE_LINE = r"no space left on device writing {} \(\d+ MiB free\): free some space"


def _fill(folder) -> None:
    """Write a filler file until the file system is full."""
    with open(folder / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"x" * 65536)
                fh.flush()
        except OSError:
            pass


@pytest.mark.dist
def test_checkpoint_on_a_full_disk_is_one_line_naming_it(tmp_path):
    with small_disk(tmp_path / "disk", "1m") as disk:
        path = disk / "checkpoints" / "last.pt"
        state = {"model": {"w": torch.zeros(512, 1024)}}  # 2 MiB
        with pytest.raises(DiskFullError) as err:
            save_checkpoint(path, state, epoch=1)
        left = sorted(p.name for p in path.parent.iterdir())
    assert re.match(ONE_LINE.format(re.escape(str(path))), str(err.value)), str(err.value)
    assert "\n" not in str(err.value) and "inline_container" not in str(err.value)
    assert left == [], f"temp files left behind: {left}"


@pytest.mark.dist
def test_result_json_on_a_full_disk_is_one_line_naming_it(tmp_path):
    with small_disk(tmp_path / "disk", "1m") as disk:
        path = disk / "job" / "result.json"
        with pytest.raises(DiskFullError) as err:
            write_text_atomic(path, "0" * (2 << 20))
        left = sorted(p.name for p in path.parent.iterdir())
    assert re.match(ONE_LINE.format(re.escape(str(path))), str(err.value)), str(err.value)
    assert left == [], f"temp files left behind: {left}"


@pytest.mark.dist
def test_mlflow_store_on_a_full_disk_is_one_line_naming_it(tmp_path, compose, capfd):
    from app.tracking.mlflow import MlflowTracker

    with small_disk(tmp_path / "disk", "3m") as disk:
        tracker = MlflowTracker(f"sqlite:///{disk}/mlflow.db")
        tracker.start(compose("+experiment=smoke"))
        _fill(disk)
        with pytest.raises(DiskFullError) as err:
            for step in range(100):  # SQLite may still fit a few rows in its free pages
                tracker.log_metrics({f"m{step}": float(step)}, step=step)
    db = re.escape(str(disk / "mlflow.db"))
    assert re.match(ONE_LINE.format(f"the MLflow store {db}"), str(err.value)), str(err.value)
    assert "Traceback" not in capfd.readouterr().err  # MLflow's own logged traceback too


@pytest.mark.dist
def test_a_killed_writers_temp_file_is_removed_and_no_other(tmp_path):
    """Chaos trial: a trainer SIGKILLed inside torch_save_atomic left checkpoints/.last.pt.*.tmp
    behind the ended job. The launcher removes temp files whose writer (this host) is gone,
    never those of a live writer or of another host sharing the folder."""
    import subprocess
    import sys

    from app.fsutil import _temp_beside, remove_orphaned_temps

    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()
    code = (
        "import os, sys, signal; from pathlib import Path; from app.fsutil import _temp_beside; "
        "_temp_beside(Path(sys.argv[1])); os.kill(os.getpid(), signal.SIGKILL)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(ckpt / "last.pt")], cwd=REPO)
    assert proc.returncode == -9
    (killed,) = ckpt.glob(".last.pt.*.tmp")
    live = _temp_beside(ckpt / "last.pt")  # this process: alive
    other = ckpt / ".last.pt.otherhost-1.abcdefgh.tmp"
    other.touch()
    assert remove_orphaned_temps(tmp_path) == [killed]
    assert sorted(p.name for p in ckpt.iterdir()) == sorted([live.name, other.name])


# ------------------------------------------------- issue 37, item 6: disk for generation


@pytest.mark.dist
def test_chunked_generation_on_a_full_disk_is_one_line_naming_the_file(tmp_path):
    """numpy's errno-less "N requested and M written" becomes the file and the free space;
    nothing of the writer (tmp, spill) is left on the disk."""
    from app.config import DatasetConfig
    from app.dataset.synthetic_stream import generate_products_chunked

    cfg = DatasetConfig(num_nodes=40_000, avg_degree=10, num_features=16)  # ~9 MiB of chunks
    with small_disk(tmp_path / "disk", "2m") as disk:
        with pytest.raises(DiskFullError) as err:
            generate_products_chunked(cfg, 0, disk / "g")
        left = sorted(p.name for p in disk.iterdir())
    msg = str(err.value)
    assert re.match(ONE_LINE.format(re.escape(str(disk)) + r"/g\.\S+"), msg), msg
    assert "\n" not in msg and "requested and" not in msg
    assert left == [], f"left behind: {left}"


@pytest.mark.dist
def test_stream_partition_that_cannot_fit_is_refused_before_generating(tmp_path):
    """The chunked graph and the partition would not fit on dataset.root's disk: one line
    with the path, the need and the free space, before any chunk is written."""
    import time

    from tests.helpers.jobs import run_app

    with small_disk(tmp_path / "disk", "4m") as disk:
        start = time.monotonic()
        proc = run_app(
            "task=partition", "partition=stream", "cluster.num_nodes=2",
            f"output_dir={disk}", f"dataset.root={disk / 'data'}", "dataset.num_nodes=200000",
            "model.num_layers=2", "sampler.num_neighbors=[5,5]", "mlflow.enabled=false",
            timeout=180,
        )  # fmt: skip
        elapsed = time.monotonic() - start
        written = [p for p in disk.rglob("*") if p.is_file()]
    assert proc.returncode == 1, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()[-1:]
    want = (
        r"error: not enough disk for generating the chunked graph \+ stream partitioning under "
        rf"{re.escape(str(disk))}\S* and {re.escape(str(disk))}\S*: needs ~[\d,]+ MiB, \d+ MiB free"
    )
    assert re.match(want, line), line
    assert "Traceback" not in proc.stderr
    assert not [p for p in written if p.suffix == ".npy"], written  # refused before any chunk
    assert elapsed < 120, elapsed
