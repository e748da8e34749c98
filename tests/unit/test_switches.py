"""Lightning's training switches: scheduler, early stopping, best-k checkpoints, gradient
clipping, bf16 autocast and `task=eval`; in one process, a 2-node job, and across a resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from app.config import ConfigError
from app.tracking.mlflow import NullTracker
from app.train.checkpoint import checkpoint_path, read_checkpoint
from app.train.loop import FitOptions, fit
from app.train.single import train_single
from app.train.switches import Switches, SwitchOptions, clip_gradients
from tests.helpers.jobs import run_app
from tests.helpers.toy import toy_config, toy_graph

KEYS = ("loss", "train_acc", "val_acc", "test_acc")


def toy_task(seed: int = 0):
    from app.task.local import LocalSource
    from app.task.node import NodeTask

    cfg = toy_config(seed, 32)
    return NodeTask(cfg, LocalSource(cfg, toy_graph(num_nodes=300, seed=1)))


def opts(tmp_path: Path | None, epochs: int, **switches) -> FitOptions:
    extra = {k: switches.pop(k) for k in ("clip_val", "precision", "resume") if k in switches}
    return FitOptions(
        epochs=epochs,
        job_dir=str(tmp_path) if tmp_path else None,
        switches=SwitchOptions(epochs=epochs, **switches),
        **extra,
    )


def lrs(history: dict[int, dict]) -> list[float]:
    return [round(history[e]["lr"], 8) for e in sorted(history)]


COSINE = [0.01 * (1 + math.cos(math.pi * t / 4)) / 2 for t in (1, 2, 3, 4)]  # T_max = 4


@pytest.mark.parametrize(
    "scheduler, expected",
    [("cosine", COSINE), ("step", [0.01, 0.001, 0.001, 0.0001])],  # step: x0.1 every 2 epochs
)
def test_epoch_schedulers_set_the_next_epochs_lr(scheduler, expected):
    task = toy_task()
    for group in task.optimizer.dense.param_groups:
        group["lr"] = 0.01
    history: dict[int, dict] = {}
    fit(task, opts(None, 4, scheduler=scheduler, step_size=2), on_epoch=history.__setitem__)
    assert lrs(history) == pytest.approx(expected, rel=1e-5, abs=1e-9)


def test_plateau_lowers_lr_when_the_monitor_stalls():
    sw = Switches.build(
        SwitchOptions(monitor="val_loss", scheduler="plateau", gamma=0.5, plateau_patience=1),
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0),
    )
    seen = [sw.after_epoch(e, {"val_loss": v})["lr"] for e, v in enumerate([3, 2, 2, 2, 1, 1])]
    assert seen == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5]


def test_early_stopping_counts_evaluations_without_improvement():
    sw = Switches.build(SwitchOptions(monitor="val_acc", patience=2, min_delta=0.01), None)
    stopped = []
    for e, v in enumerate([0.5, 0.6, 0.605, 0.61]):  # +0.005, +0.01: not above min_delta
        sw.after_epoch(e, {"val_acc": v})
        stopped.append(sw.stopped)
    assert stopped == [False, False, False, True] and sw.best == 0.6
    sw2 = Switches.build(SwitchOptions(monitor="loss", patience=2), None)
    for e, v in enumerate([1.0, 0.9, 0.95, 0.91]):
        sw2.after_epoch(e, {"loss": v, "val_acc": 0.0})
    assert sw2.stopped and sw2.best == 0.9 and sw2.wait == 2


def test_a_monitor_the_job_does_not_log_is_one_line():
    sw = Switches.build(SwitchOptions(monitor="val_f1", patience=1), None)
    with pytest.raises(ConfigError, match=r"train.monitor=val_f1: not among this job's metrics"):
        sw.after_epoch(0, {"loss": 1.0, "val_acc": 0.5})
    unused = Switches.build(SwitchOptions(monitor="time_s"), None)  # the sweep table's column
    assert unused.after_epoch(0, {"loss": 1.0, "val_acc": 0.5}) == {}


def test_best_k_keeps_the_best_files_beside_last(tmp_path):
    task = toy_task()
    history: dict[int, dict] = {}
    fit(task, opts(tmp_path, 6, save_top_k=2), on_epoch=history.__setitem__)
    files = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    best = sorted(history, key=lambda e: (-history[e]["val_acc"], e))[:2]
    want = sorted(f"epoch_{e}-val_acc_{history[e]['val_acc']:.4f}.pt" for e in best)
    want = [*want, "last.pt"]  # each with its checksum (app.partition.reader.checksum_file)
    assert files == sorted(want + [f"{w}.xxh3" for w in want]), (files, history)
    for e in best:
        saved = read_checkpoint(tmp_path / "checkpoints" / f"epoch_{e}-val_acc_"
                                f"{history[e]['val_acc']:.4f}.pt")  # fmt: skip
        assert saved["epoch"] == e and saved["metrics"]["val_acc"] == history[e]["val_acc"]


def test_clipping_bounds_the_gradient_norm():
    lin = torch.nn.Linear(8, 4)
    (lin(torch.randn(16, 8)) * 100).sum().backward()
    clip_gradients(lin, 0.5)
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in lin.parameters()]))
    assert float(norm) == pytest.approx(0.5, rel=1e-4)


def test_bf16_mixed_and_clipping_train_on_cpu():
    base = fit(toy_task(), opts(None, 6))
    task = toy_task()
    seen_dtypes = []
    for module in task.bare.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda m, i, out: seen_dtypes.append(out.dtype))
    mixed = fit(task, opts(None, 6, precision="bf16-mixed", clip_val=1.0))
    assert torch.bfloat16 in seen_dtypes  # autocast was on in training steps
    assert all(torch.isfinite(torch.tensor(mixed[k])) for k in KEYS)
    assert mixed["val_acc"] > 0.6 and abs(mixed["val_acc"] - base["val_acc"]) < 0.2, (mixed, base)


def test_resume_keeps_scheduler_and_early_stopping_state(tmp_path):
    """Killed after epoch 2, resumed: the same lr, patience count, best-k files and metrics as
    one uninterrupted run."""
    sw = {"scheduler": "cosine", "patience": 3, "save_top_k": 2}
    whole: dict[int, dict] = {}
    fit(toy_task(), opts(tmp_path / "a", 6, **sw), on_epoch=whole.__setitem__)

    def crash_after_epoch_2(epoch: int, metrics: dict) -> None:
        if epoch == 2:  # its checkpoint is written: the job is killed here
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit(toy_task(), opts(tmp_path / "b", 6, **sw), on_epoch=crash_after_epoch_2)
    resumed: dict[int, dict] = {}
    fit(toy_task(), opts(tmp_path / "b", 6, resume=True, **sw), on_epoch=resumed.__setitem__)
    assert list(resumed) == [e for e in whole if e >= 3] and resumed
    for e in resumed:
        assert {k: resumed[e][k] for k in (*KEYS, "lr")} == {k: whole[e][k] for k in (*KEYS, "lr")}
    a = read_checkpoint(checkpoint_path(tmp_path / "a"))["switches"]
    b = read_checkpoint(checkpoint_path(tmp_path / "b"))["switches"]
    assert a == b
    names = lambda d: sorted(p.name for p in (d / "checkpoints").iterdir())  # noqa: E731
    assert names(tmp_path / "a") == names(tmp_path / "b")


def test_early_stopping_ends_the_job_and_a_resume_trains_nothing(tmp_path):
    sw = {"monitor": "val_acc", "patience": 1, "min_delta": 1.0}  # never improves by 1.0
    history: dict[int, dict] = {}
    fit(toy_task(), opts(tmp_path, 10, **sw), on_epoch=history.__setitem__)
    assert list(history) == [0, 1]
    again: dict[int, dict] = {}
    final = fit(toy_task(), opts(tmp_path, 10, resume=True, **sw), on_epoch=again.__setitem__)
    assert again == {} and final == history[1]


def tiny(compose, tmp_path, *overrides):
    return compose(
        "experiment=smoke", "dataset.train_frac=0.5", "loader.batch_size=128",
        f"dataset.root={tmp_path / 'data'}", *overrides,
    )  # fmt: skip


def test_task_eval_scores_a_best_checkpoint_without_training(compose, tmp_path):
    cfg = tiny(compose, tmp_path, "train.epochs=4", "train.save_top_k=1")
    trained: dict[int, dict] = {}
    tracker = NullTracker()
    tracker.log_metrics = lambda m, step=None: trained.__setitem__(step, m)  # type: ignore
    train_single(cfg, job_dir=tmp_path / "job", tracker=tracker)
    (best,) = [p for p in (tmp_path / "job" / "checkpoints").glob("*.pt") if p.name != "last.pt"]
    epoch = int(best.name.split("-")[0].removeprefix("epoch_"))
    cfg.task, cfg.ckpt_path = "eval", str(best)
    before = best.stat().st_mtime_ns
    scored = train_single(cfg, job_dir=tmp_path / "eval", tracker=NullTracker())
    assert scored["epoch"] == epoch and "loss" not in scored  # nothing trained
    for k in ("val_acc", "test_acc"):
        assert scored[k] == trained[epoch][k]
    assert best.stat().st_mtime_ns == before and not (tmp_path / "eval" / "checkpoints").exists()
    result = json.loads((tmp_path / "eval" / "result.json").read_text())
    assert result["epochs_done"] == epoch + 1


def test_task_eval_refuses_another_model_in_one_line(compose, tmp_path):
    cfg = tiny(compose, tmp_path, "train.epochs=1")
    train_single(cfg, job_dir=tmp_path / "job", tracker=NullTracker())
    cfg.task, cfg.ckpt_path = "eval", str(checkpoint_path(tmp_path / "job"))
    cfg.model.hidden_channels = 48
    with pytest.raises(ConfigError, match=r"does not fit this job's model \(size mismatch for"):
        train_single(cfg, job_dir=tmp_path / "eval", tracker=NullTracker())


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["train.scheduler=linear"], "train.scheduler='linear': expected one of none, cosine"),
        (["train.precision=16-mixed"], "train.precision='16-mixed': expected one of 32-true"),
        (["train.save_top_k=2", "train.checkpoint=false"], "set train.checkpoint=true as well"),
        (["train.early_stopping.patience=-1"], "train.early_stopping.patience=-1: must be >= 0"),
        (["task=eval"], "ckpt_path=None: task=eval scores a checkpoint: ckpt_path=PATH.pt"),
        (["task=eval", "ckpt_path=/no/such.pt"], "ckpt_path='/no/such.pt': no such file"),
    ],
)
def test_switch_values_are_checked_before_anything_starts(compose, overrides, message):
    with pytest.raises(ConfigError) as err:
        compose("experiment=smoke", *overrides)
    assert message in str(err.value)


def _job(tmp_path: Path, name: str, *args: str, run_dir: Path | None = None):
    """(result.json, job dir) of a 2-node smoke job with `args`."""
    out = tmp_path / name
    proc = run_app(
        "experiment=smoke", "cluster.num_nodes=2", "dataset.train_frac=0.5",
        "loader.batch_size=128", "mlflow.enabled=false", f"output_dir={out}",
        f"dataset.root={tmp_path / 'data'}", "partition.root=" + str(tmp_path / "parts"),
        *([f"hydra.run.dir={run_dir}"] if run_dir else []), *args, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    job = run_dir or next((out / "runs").iterdir())
    return json.loads((job / "result.json").read_text()), job


@pytest.mark.dist
@pytest.mark.long
def test_two_node_switches_resume_and_eval(tmp_path):
    """2 nodes: a scheduled, clipped, bf16 job keeps its best checkpoint; stopped after 2
    epochs and resumed it ends as the uninterrupted job did; task=eval re-scores its best."""
    switches = (
        "train.scheduler=step", "train.scheduler_step_size=1", "train.scheduler_gamma=0.5",
        "train.save_top_k=1", "train.gradient_clip_val=0.5", "train.precision=bf16-mixed",
        "train.early_stopping.patience=3",
    )  # fmt: skip
    whole, job = _job(tmp_path, "whole", "train.epochs=4", *switches)
    assert whole["world_size"] == 2 and whole["lr"] == pytest.approx(0.003 * 0.5**4)
    run_dir = tmp_path / "b-run"
    _job(tmp_path, "b", "train.epochs=2", *switches, run_dir=run_dir)
    resumed, _ = _job(tmp_path, "b", "train.epochs=4", "train.resume=true", *switches,
                      run_dir=run_dir)  # fmt: skip
    # The scheduler went on from its saved state (restarted, lr would be 0.003 * 0.5**2).
    # Metrics agree closely, not bitwise: a 2-node job resumed at an epoch end with another
    # train.epochs differs in the last digits even without switches (a 2-node job killed mid-
    # epoch and resumed with the same train.epochs is bitwise: tests/launcher/test_trust_launch).
    assert resumed["lr"] == whole["lr"] and resumed["epochs_done"] == whole["epochs_done"] == 4
    for k in KEYS:
        assert resumed[k] == pytest.approx(whole[k], abs=0.05), k
    saved = read_checkpoint(run_dir / "checkpoints" / "last.pt")["switches"]
    assert (
        saved["scheduler"]
        == read_checkpoint(job / "checkpoints" / "last.pt")["switches"]["scheduler"]
    )
    (best,) = [p for p in (job / "checkpoints").glob("*.pt") if p.name != "last.pt"]
    kept = read_checkpoint(best)
    scored, _ = _job(tmp_path, "eval", "task=eval", f"ckpt_path={best}")
    assert scored["epoch"] == kept["epoch"]
    assert {k: scored[k] for k in ("val_acc", "test_acc")} == {
        k: kept["metrics"][k] for k in ("val_acc", "test_acc")
    }
