"""Trust (issue 37, item 1): a job's own files (checkpoints, halo caches) carry a checksum
written with them and verified on load; a NaN loss fails the run; result.json is strict JSON."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from app.partition.reader import checksum_file, checksum_problem, save_checked
from app.task.local import LocalSource
from app.task.node import NodeTask
from app.train.checkpoint import CheckpointError, checkpoint_path, read_checkpoint
from app.train.finite import NonFiniteLossError, result_json
from app.train.loop import FitOptions, fit
from tests.helpers.disk import rot
from tests.helpers.toy import toy_config, toy_graph


def _task(data, batch_size: int = 32) -> NodeTask:
    cfg = toy_config(0, batch_size)
    return NodeTask(cfg, LocalSource(cfg, data))


def test_a_rotted_checkpoint_refuses_to_resume_naming_the_file(tmp_path):
    data = toy_graph(num_nodes=200, seed=3)
    fit(_task(data), FitOptions(epochs=1, job_dir=str(tmp_path)))
    path = checkpoint_path(tmp_path)
    assert checksum_problem(path) is None
    rot(path)  # size and mtime kept
    with pytest.raises(CheckpointError) as err:
        fit(_task(data), FitOptions(epochs=2, job_dir=str(tmp_path), resume=True))
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and "checksum mismatch" in msg, msg


def test_a_checkpoint_without_its_checksum_is_refused(tmp_path):
    data = toy_graph(num_nodes=200, seed=3)
    fit(_task(data), FitOptions(epochs=1, job_dir=str(tmp_path)))
    path = checkpoint_path(tmp_path)
    checksum_file(path).unlink()
    with pytest.raises(CheckpointError, match="no checksum file last.pt.xxh3"):
        read_checkpoint(path)


def test_a_writer_killed_between_the_two_renames_leaves_a_valid_file(tmp_path):
    """The sidecar is renamed first: the old file it replaced still matches (`previous`),
    any other content does not."""
    path = tmp_path / "f.pt"
    save_checked({"a": torch.arange(10)}, path)
    old = tmp_path / "old.pt"
    shutil.copy(path, old)
    save_checked({"a": torch.arange(20)}, path)
    assert checksum_problem(path) is None
    shutil.copy(old, path)  # the state a kill after the sidecar's rename leaves
    assert checksum_problem(path) is None
    torch.save({"a": torch.arange(30)}, path)
    assert "checksum mismatch" in (checksum_problem(path) or "")


def test_a_nan_input_ends_training_naming_epoch_step_and_input():
    data = toy_graph(num_nodes=200, seed=3)
    data.x[:, 2] = float("nan")
    with pytest.raises(NonFiniteLossError) as err:
        fit(_task(data), FitOptions(epochs=1))
    msg = str(err.value)
    assert "\n" not in msg and "epoch 0, step 0" in msg and "input x (" in msg, msg


def test_a_nan_parameter_ends_training_naming_it():
    task = _task(toy_graph(num_nodes=200, seed=3))
    name, param = next(iter(task.model.named_parameters()))
    with torch.no_grad():
        param.view(-1)[0] = float("inf")
    with pytest.raises(NonFiniteLossError, match=f"epoch 0, step 0: parameter {name} "):
        fit(task, FitOptions(epochs=1))


def test_result_json_is_strict_json():
    text = result_json({"loss": float("nan"), "val_acc": float("inf"), "steps": 3.0})
    assert json.loads(text) == {"loss": None, "val_acc": None, "steps": 3.0}


def test_a_rotted_dataset_cache_is_generated_again_with_a_warning(tmp_path, caplog):
    from app.config import DatasetConfig
    from app.dataset import load_dataset

    cfg = DatasetConfig(root=str(tmp_path), num_nodes=3000, num_features=64)
    first = load_dataset(cfg, seed=0)
    (path,) = tmp_path.glob("*/data.pt")
    rot(path)
    with caplog.at_level("WARNING"):
        again = load_dataset(cfg, seed=0)
    (line,) = [r.getMessage() for r in caplog.records if "generating it again" in r.getMessage()]
    assert str(path) in line and "checksum mismatch" in line, line
    for key in ("x", "y", "edge_index", "train_mask"):
        assert torch.equal(first[key], again[key]), key
    assert checksum_problem(path) is None


def test_a_rotted_link_split_is_refused_by_its_reader(tmp_path):
    from app.partition.link import LINK_SPLIT_FILE, load_held_out
    from app.partition.reader import PartitionError

    path = tmp_path / LINK_SPLIT_FILE
    save_checked({"val": torch.arange(600_000).view(2, -1), "test": torch.zeros(2, 5)}, path)
    assert torch.equal(load_held_out(tmp_path)["test"], torch.zeros(2, 5))
    rot(path)
    with pytest.raises(PartitionError, match=f"{path}: checksum mismatch"):
        load_held_out(tmp_path)
