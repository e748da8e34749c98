"""`TrainLoader` and `EpochBatching`: one protocol for every loader, one batching rule.

The training loop and the evaluators call `TrainLoader`'s methods on whatever loader a source
made; the local and the distributed loaders hold the same `EpochBatching`, so they cut and
seed the same batches (the distributed equivalence tests rest on that).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data

from app.distributed import DistLinkNeighborLoader, DistNeighborLoader
from app.distributed.engine import BatchEngine
from app.loader import LinkNeighborLoader, NeighborLoader
from app.loader.epochs import EpochBatching
from app.loader.protocol import TrainLoader
from app.task.device import DeviceLoader

APP = Path(__file__).resolve().parents[2] / "app"


def test_epochs_cover_every_input_once_reproducibly():
    rule = EpochBatching(batch_size=4, shuffle=True, seed=7)
    first = rule.indices(10, 0)
    assert [b.numel() for b in first] == [4, 4, 2] and rule.num_batches(10) == 3
    assert sorted(torch.cat(first).tolist()) == list(range(10))
    assert all(torch.equal(a, b) for a, b in zip(first, rule.indices(10, 0), strict=True))
    assert not torch.equal(torch.cat(first), torch.cat(rule.indices(10, 1)))  # per epoch
    assert rule.batch_seed(0, 1) != rule.batch_seed(1, 1) != rule.batch_seed(0, 2)


def test_drop_last_and_order_without_shuffle():
    rule = EpochBatching(batch_size=4, drop_last=True)
    assert rule.num_batches(10) == 2
    assert torch.equal(torch.cat(rule.indices(10, 3)), torch.arange(8))


def test_a_bad_batch_size_is_named():
    with pytest.raises(ValueError, match="batch_size=0: pass a batch size >= 1"):
        EpochBatching(batch_size=0)


def test_local_loaders_are_train_loaders():
    data = Data(x=torch.randn(30, 2), edge_index=torch.randint(0, 30, (2, 90)), num_nodes=30)
    nodes = NeighborLoader(data, [2], input_nodes=torch.arange(10), batch_size=4, shuffle=True)
    links = LinkNeighborLoader(data, [2], batch_size=32)
    for loader, inputs in ((nodes, 10), (links, 90)):
        wrapped: TrainLoader = DeviceLoader(loader, torch.device("cpu"))
        assert wrapped.num_inputs == inputs and len(wrapped) == -(
            -inputs // loader.batching.batch_size
        )
        wrapped.prefetch()
        assert wrapped.data_stats() == {}  # nothing remote: the loop logs no traffic
        assert len(list(wrapped)) == len(wrapped) and wrapped.epoch == 1
        wrapped.epoch = 5  # a resumed job sets it through the wrapper
        assert loader.epoch == 5
        wrapped.close()


def test_the_loaders_share_the_batching_rule():
    """The distributed loaders hold the local loaders' `EpochBatching` and call its methods;
    nothing else in app/ draws an epoch's permutation."""
    drawers = [
        p.relative_to(APP).as_posix()
        for p in sorted(APP.rglob("*.py"))
        if "randperm" in p.read_text() and p.parts[-2] in ("loader", "distributed")
    ]
    assert drawers == ["loader/epochs.py"]
    for cls in (NeighborLoader, LinkNeighborLoader):
        assert "EpochBatching(" in inspect.getsource(cls.__init__), cls
    assert inspect.signature(BatchEngine).parameters["batching"].annotation == "EpochBatching"
    for cls in (BatchEngine, DistNeighborLoader, DistLinkNeighborLoader, NeighborLoader):
        assert isinstance(inspect.getattr_static(cls, "num_inputs"), property), cls


@pytest.mark.parametrize(
    "module", ["train/loop.py", "train/distributed.py", "task/evaluate.py", "task/device.py"]
)
def test_the_loop_probes_no_loader(module):
    """Typed objects, not probes: no hasattr / getattr / __getattr__, no private calls."""
    tree = ast.parse((APP / module).read_text())
    probes = [
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("hasattr", "getattr")
    ]
    forwarding = [
        n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"
    ]
    private = [
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "_num_inputs"
    ]
    assert probes == forwarding == private == []
