"""Training loop over the task layer: learns a toy graph, checkpoints and resumes (embedding
rows and sparse optimizer state included), survives uneven DDP inputs."""

from __future__ import annotations

import faulthandler
import gc
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from app.config import Config, DatasetConfig, ModelConfig, validate
from app.model.registry import build_model
from app.task.local import LocalSource
from app.task.metrics import binary_auc, mrr
from app.task.node import NodeTask, node_step
from app.tracking.mlflow import NullTracker
from app.train.checkpoint import checkpoint_path, load_checkpoint, read_checkpoint
from app.train.loop import FitOptions, fit, train_epoch
from app.train.single import train_single
from tests.helpers.ports import free_port
from tests.helpers.toy import FANOUTS, ToyLoader, toy_config, toy_graph, toy_hetero


def toy_task(data, seed: int = 0, batch_size: int = 32) -> NodeTask:
    cfg = toy_config(seed, batch_size)
    return NodeTask(cfg, LocalSource(cfg, data))


def small_model(data, seed=0):
    torch.manual_seed(seed)
    cfg = ModelConfig(name="sage", hidden_channels=32, num_layers=2, dropout=0.2)
    return build_model(cfg, data.x.size(1), data.num_classes)


def test_fit_learns_toy_graph():
    task = toy_task(toy_graph(num_nodes=400, seed=0))
    m = fit(task, FitOptions(epochs=12))
    assert m["val_acc"] > 0.85 and m["test_acc"] > 0.85, m
    assert m["train_acc"] > 0.8 and m["loss"] < 0.6, m
    assert m["seeds_per_s"] > 0 and m["sampled_edges_per_s"] > 0
    assert 0.0 <= m["data_wait_frac"] < 1.0
    assert m["steps"] == len(task.loaders["train"])


def test_max_steps_caps_an_epoch():
    task = toy_task(toy_graph(num_nodes=200, seed=2), batch_size=16)
    stats = train_epoch(task.model, task.loaders["train"], task.optimizer, task.step, max_steps=2)
    assert stats.steps == 2 and stats.seeds == 32


def test_checkpoint_resume_continues_after_saved_epoch(tmp_path):
    data = toy_graph(num_nodes=200, seed=3)
    task = toy_task(data)
    fit(task, FitOptions(epochs=2, job_dir=str(tmp_path)))
    saved = read_checkpoint(checkpoint_path(tmp_path))
    assert saved["epoch"] == 1 and "val_acc" in saved["metrics"]
    assert set(saved) >= {"model", "optimizer", "embeddings", "epoch", "metrics", "rng"}
    assert not list(checkpoint_path(tmp_path).parent.glob("*.tmp"))

    fresh = toy_task(data, seed=99)
    load_checkpoint(checkpoint_path(tmp_path), fresh)
    for a, b in zip(fresh.bare.state_dict().values(), task.bare.state_dict().values(), strict=True):
        assert torch.equal(a, b)

    seen: list[int] = []
    resumed = toy_task(data, seed=99)
    opts = FitOptions(epochs=4, job_dir=str(tmp_path), resume=True)
    fit(resumed, opts, on_epoch=lambda e, _: seen.append(e))
    assert seen == [2, 3]
    assert read_checkpoint(checkpoint_path(tmp_path))["epoch"] == 3


def test_resume_of_a_finished_job_returns_its_last_metrics(tmp_path):
    """A restart after the last epoch's checkpoint (a kill before the process exited) trains
    nothing and reports the metrics that checkpoint holds, not an empty result."""
    data = toy_graph(num_nodes=200, seed=3)
    last = fit(toy_task(data), FitOptions(epochs=2, job_dir=str(tmp_path)))
    seen: list[int] = []
    opts = FitOptions(epochs=2, job_dir=str(tmp_path), resume=True)
    again = fit(toy_task(data, seed=99), opts, on_epoch=lambda e, _: seen.append(e))
    assert seen == [] and again == last and "val_acc" in again


def test_link_metrics():
    scores = torch.tensor([0.9, 0.8, 0.3, 0.3, 0.1])
    labels = torch.tensor([1, 0, 1, 0, 0])
    pairs = [(p, n) for p in (0.9, 0.3) for n in (0.8, 0.3, 0.1)]
    brute = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs) / len(pairs)
    assert binary_auc(scores, labels) == pytest.approx(brute)
    assert mrr(torch.tensor([1.0, 0.5]), torch.tensor([[0.0, 0.2], [0.9, 0.7]])) == 2 / 3


def _train_uneven(rank: int, out_dir: str) -> None:
    data = toy_graph(num_nodes=200, seed=4)
    seeds = torch.arange(96) if rank == 0 else torch.arange(100, 132)
    loader = ToyLoader(data, FANOUTS, seeds, batch_size=16, seed=rank)
    model = DistributedDataParallel(small_model(data))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    stats = [train_epoch(model, loader, opt, node_step) for _ in range(2)][-1]
    flat = torch.cat([p.detach().view(-1) for p in model.parameters()])
    torch.save({"steps": stats.steps, "seeds": stats.seeds, "params": flat}, f"{out_dir}/{rank}.pt")


def _uneven_worker(rank: int, port: int, out_dir: str) -> None:
    """Rank 0 trains on 6 batches, rank 1 on 2; both must finish the epoch and agree.

    The DDP model lives in `_train_uneven` so it is destroyed BEFORE the process group:
    destroying a DDP model after `destroy_process_group` hung its process at exit now and then.
    """
    faulthandler.dump_traceback_later(90, exit=True)  # a hang shows where, then exits
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=timedelta(seconds=30),
    )
    try:
        _train_uneven(rank, out_dir)
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.dist
def test_ddp_uneven_batches_do_not_hang(tmp_path):
    ctx = mp.start_processes(
        _uneven_worker,
        args=(free_port(), str(tmp_path)),
        nprocs=2,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + 150  # after the workers own 90 s dump
    try:
        while not ctx.join(timeout=1):
            assert time.monotonic() < deadline, "DDP workers with uneven batches hung"
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    r0, r1 = (torch.load(tmp_path / f"{r}.pt", weights_only=True) for r in (0, 1))
    assert r0["steps"] == r1["steps"] == 6 + 2  # job-wide sums, identical on both ranks
    assert r0["seeds"] == 96 + 32
    torch.testing.assert_close(r0["params"], r1["params"])  # replicas stayed in sync


class RecordingTracker(NullTracker):
    """A tracker that keeps what it was given (the MLflow one is tested in test_tracking)."""

    def __init__(self) -> None:
        self.metrics: list[tuple[int | None, dict[str, float]]] = []
        self.status: str | None = None

    def start(self, cfg, run_name=None, parent_run_id=None, tags=None):
        self.run_id = "local"
        return self.run_id

    def log_metrics(self, metrics, step=None):
        self.metrics.append((step, dict(metrics)))

    def end(self, status="FINISHED", error=None):
        self.status, self.run_id = status, None


def tiny_config(tmp_path, **train) -> Config:
    cfg = Config(output_dir=str(tmp_path))
    cfg.partition.num_parts = 1
    cfg.dataset = DatasetConfig(root=str(tmp_path / "data"), num_nodes=1500, num_features=16)
    cfg.dataset.num_classes = 5
    cfg.model = ModelConfig(hidden_channels=32, num_layers=2, dropout=0.2)
    cfg.sampler.num_neighbors = [5, 5]
    cfg.loader.batch_size = 64
    cfg.train.epochs = 2
    cfg.train.lr = 0.01
    for key, value in train.items():
        setattr(cfg.train, key, value)
    return validate(cfg)


def test_train_single_end_to_end(tmp_path):
    tracker = RecordingTracker()
    m = train_single(tiny_config(tmp_path), job_dir=tmp_path / "job", tracker=tracker)
    assert tracker.status == "FINISHED"
    assert [step for step, _ in tracker.metrics] == [0, 1]
    assert m["val_acc"] > 0.3 and m["steps"] > 0  # 5 classes: better than chance
    assert torch.load(checkpoint_path(tmp_path / "job"), weights_only=True)["epoch"] == 1


def test_train_single_link_objective(tmp_path):
    cfg = tiny_config(tmp_path, objective="link", max_steps_per_epoch=5)
    m = train_single(cfg, job_dir=tmp_path / "job", tracker=RecordingTracker())
    assert m["steps"] == 5
    assert 0.0 <= m["val_auc"] <= 1.0 and m["val_auc"] > 0.55, m


def hetero_config() -> Config:
    cfg = Config(model=ModelConfig(hidden_channels=16, num_layers=2, dropout=0.0))
    cfg.sampler.num_neighbors = [3, 2]
    cfg.loader.batch_size = 20
    return cfg


def test_hetero_training_updates_embeddings(tmp_path):
    data = toy_hetero()
    cfg = hetero_config()
    task = NodeTask(cfg, LocalSource(cfg, data))
    table = task.tables.rows.tables["author"]
    before = table.weight.detach().clone()
    first = train_epoch(task.model, task.loaders["train"], task.optimizer, task.step)
    for _ in range(5):
        last = train_epoch(task.model, task.loaders["train"], task.optimizer, task.step)
    assert last.loss < first.loss
    assert not torch.equal(before, table.weight)
    assert not any("embeddings" in k for k in task.bare.state_dict())  # rows live beside it
    # model + dense Adam + SparseAdam state + rows survive a weights-only checkpoint round trip
    fit(task, FitOptions(epochs=1, job_dir=str(tmp_path)))
    saved = read_checkpoint(checkpoint_path(tmp_path))
    assert torch.equal(saved["embeddings"]["author"], table.weight.detach())
    sparse = saved["optimizer"]["sparse"]
    assert set(sparse["state"]["author"]) == {"exp_avg", "exp_avg_sq"}
    assert sparse["step"]["author"] == 7 * len(task.loaders["train"])
    cfg.seed = 5
    twin = NodeTask(cfg, LocalSource(cfg, data))
    load_checkpoint(checkpoint_path(tmp_path), twin)
    twin_table = twin.tables.rows.tables["author"]
    assert torch.equal(twin_table.weight, table.weight)
    twin_state = twin.optimizer.state_dict()["sparse"]
    for key, value in sparse["state"]["author"].items():
        assert torch.equal(twin_state["state"]["author"][key], value)
    assert twin_state["step"] == sparse["step"]


@pytest.mark.parametrize("hetero", [False, True], ids=["homo", "hetero"])
def test_resumed_run_reproduces_the_uninterrupted_one(tmp_path, hetero):
    """Stop after epoch 1, resume to epoch 2: the same losses and accuracies as one run.

    Needs everything in the checkpoint: weights, dense + sparse optimizer state, embedding
    rows, RNG states (dropout) and the loaders' epochs (shuffle and sampling seeds).
    """

    def task() -> NodeTask:
        if hetero:
            cfg = hetero_config()
            cfg.model.dropout = 0.3
            return NodeTask(cfg, LocalSource(cfg, toy_hetero()))
        return toy_task(toy_graph(num_nodes=300, seed=1))

    keys = ("loss", "train_acc", "val_acc", "test_acc")
    whole: dict[int, dict] = {}
    fit(task(), FitOptions(epochs=3, job_dir=str(tmp_path / "a")), on_epoch=whole.__setitem__)
    fit(task(), FitOptions(epochs=2, job_dir=str(tmp_path / "b")))
    resumed: dict[int, dict] = {}
    opts = FitOptions(epochs=3, job_dir=str(tmp_path / "b"), resume=True)
    fit(task(), opts, on_epoch=resumed.__setitem__)
    assert list(resumed) == [2]
    assert {k: resumed[2][k] for k in keys} == {k: whole[2][k] for k in keys}


class _Crash(Exception):
    """Stands in for a kill right after a mid-epoch checkpoint."""


def test_mid_epoch_checkpoint_resumes_bitwise(tmp_path):
    """train.checkpoint_every_steps: killed inside epoch 1 after its step-4 checkpoint, the
    resumed run ends with exactly the uninterrupted run's metrics (same batches, weights,
    optimizer and RNG states, and the interrupted epoch's running sums)."""
    data = toy_graph(num_nodes=400, seed=5)
    keys = ("loss", "train_acc", "val_acc", "test_acc", "steps")
    whole: dict[int, dict] = {}
    fit(
        toy_task(data, batch_size=16),
        FitOptions(epochs=2, job_dir=str(tmp_path / "a")),
        on_epoch=whole.__setitem__,
    )

    path = checkpoint_path(tmp_path / "b")
    killed = toy_task(data, batch_size=16)
    opts = FitOptions(epochs=2, job_dir=str(tmp_path / "b"), checkpoint_every_steps=2)
    real_step = killed.step

    def step_then_crash(model, batch):
        saved = read_checkpoint(path) if path.exists() else {}
        if saved.get("position", {}).get("epoch") == 1 and saved["position"]["step"] == 4:
            raise _Crash
        return real_step(model, batch)

    killed.step = step_then_crash
    with pytest.raises(_Crash):
        fit(killed, opts)
    saved = read_checkpoint(path)
    assert saved["epoch"] == 0 and saved["loader_epochs"]["train"] == 1

    resumed: dict[int, dict] = {}
    opts = FitOptions(epochs=2, job_dir=str(tmp_path / "b"), resume=True)
    fit(toy_task(data, batch_size=16), opts, on_epoch=resumed.__setitem__)
    assert list(resumed) == [1]
    assert {k: resumed[1][k] for k in keys} == {k: whole[1][k] for k in keys}
    assert "position" not in read_checkpoint(path)  # the epoch's own checkpoint replaced it
