"""PyG's `torch_geometric.distributed` module layout and store surface on this package (issue
29), in one process: the façade modules, COO / CSR / CSC as put and converted, global ids,
whole-graph node time, edge features of a partition, `remove_duplicates`, the Partitioner
writing into an empty folder, and the loader's DataLoader arguments."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.sampler import SamplerOutput

import app.distributed as pyg_dist
from app.distributed.utils import remove_duplicates


def test_pyg_module_layout():
    names = {
        "dist_context": ["DistContext", "DistRole"],
        "local_graph_store": ["LocalGraphStore"],
        "local_feature_store": ["LocalFeatureStore"],
        "partition": ["Partitioner", "load_partition_info"],
        "dist_neighbor_sampler": ["DistNeighborSampler"],
        "dist_loader": ["DistLoader"],
        "dist_neighbor_loader": ["DistNeighborLoader"],
        "dist_link_neighbor_loader": ["DistLinkNeighborLoader"],
        "rpc": [
            "init_rpc",
            "shutdown_rpc",
            "rpc_async",
            "rpc_sync",
            "rpc_register",
            "RPCRouter",
            "RPCCallBase",
            "global_all_gather",
            "global_barrier",
            "rpc_partition_to_workers",
            "rpc_is_initialized",
            "rpc_require_initialized",
        ],  # fmt: skip
        "utils": ["remove_duplicates", "as_str", "reverse_edge_type"],
    }
    for module, attrs in names.items():
        mod = importlib.import_module(f"app.distributed.{module}")
        for attr in attrs:
            assert hasattr(mod, attr), f"app.distributed.{module}.{attr}"
    assert (
        pyg_dist.LocalGraphStore
        is importlib.import_module("app.distributed.local_graph_store").LocalGraphStore
    )  # one implementation


def test_graph_store_keeps_layouts_as_put_and_converts():
    gs = pyg_dist.LocalGraphStore()
    assert not gs.is_sorted
    coo = torch.tensor([[1, 5, 7, 1, 6], [0, 1, 0, 2, 1]])
    gs.put_edge_index(coo, edge_type=None, layout="coo", size=(8, 3))
    gs.put_edge_id(torch.tensor([10, 11, 12, 13, 14]), edge_type=None, layout="coo", size=(8, 3))
    assert gs.get_edge_index(None, "coo") is coo  # as given
    row, colptr = gs.get_edge_index(None, "csc")
    assert colptr.tolist() == [0, 2, 4, 5] and row.tolist() == [1, 7, 5, 6, 1]
    assert gs.get_edge_id(None, "csc").tolist() == [10, 12, 11, 14, 13]
    rowptr, col = gs.get_edge_index(None, "csr")
    assert rowptr.tolist() == [0, 0, 2, 2, 2, 2, 3, 4, 5] and col.tolist() == [0, 2, 1, 1, 0]
    assert gs.csc()["edge_id"].tolist() == [10, 12, 11, 14, 13]  # the sampler's view
    assert len(gs.get_all_edge_attrs()) == 1
    gs.put_edge_index(torch.tensor([[0], [2]]), edge_type=None, layout="coo", size=(8, 3))
    gs.remove_edge_id(None, "coo")
    assert gs.get_edge_index(None, "csc")[0].tolist() == [0]  # conversions follow a new put
    assert gs.remove_edge_index(None, "coo") and gs.get_all_edge_attrs() == []


def test_graph_store_from_data_is_pyg_sorted():
    ei = torch.tensor([[1, 5, 7, 1, 6], [0, 1, 0, 2, 1]])
    gs = pyg_dist.LocalGraphStore.from_data(torch.tensor([0, 2, 1, 4, 3]), ei, num_nodes=8)
    assert gs.get_edge_index(None, "coo").tolist() == [[1, 7, 5, 6, 1], [0, 0, 1, 1, 2]]
    assert gs.get_edge_id(None, "coo").tolist() == [0, 1, 2, 3, 4]
    attr = gs.get_all_edge_attrs()[0]
    assert (attr.layout.value, attr.is_sorted, attr.size) == ("coo", True, (8, 8))
    bare = pyg_dist.LocalGraphStore.from_data(None, ei, num_nodes=8)  # PyG allows no edge ids
    assert bare.get_edge_id(None, "coo") is None  # as PyG; the sampler numbers by position
    assert bare.csc()["edge_id"].tolist() == [0, 2, 1, 4, 3]


def test_feature_store_rows_as_given_by_global_id():
    ids = torch.tensor([5, 1, 8, 2])
    x = torch.arange(4.0).view(4, 1)
    fs = pyg_dist.LocalFeatureStore.from_data(ids, x, None, torch.tensor([3, 0]),
                                              torch.ones(2, 2))  # fmt: skip
    assert torch.equal(fs.get_global_id(None), ids) and torch.equal(fs.get_tensor(None, "x"), x)
    assert [(a.group_name, a.attr_name) for a in fs.get_all_tensor_attrs()] == [
        (None, "x"), ((None, None), "edge_attr")]  # fmt: skip
    assert fs.get_local_id(None, torch.tensor([2, 5])).tolist() == [3, 0]
    got = fs.get_tensor_from_global_id(group_name=None, attr_name="x", index=torch.tensor([8, 1]))
    assert got.view(-1).tolist() == [2.0, 1.0]
    with pytest.raises(KeyError, match=r"node ids \[7\]"):
        fs.get_local_id(None, torch.tensor([7]))
    with pytest.raises(ValueError, match="'edge_id' needs to be present"):
        pyg_dist.LocalFeatureStore.from_data(ids, edge_attr=torch.ones(2, 2))
    fs.put_global_id(torch.tensor([0, 1, 2, 3]), group_name=None)  # a range now: rows = ids
    assert fs.get_local_id(None, torch.tensor([3, 0])).tolist() == [3, 0]


def _temporal_graph() -> Data:
    gen = torch.Generator().manual_seed(1)
    n, e = 40, 160
    data = Data(x=torch.randn(n, 3, generator=gen), y=torch.arange(n) % 2,
                edge_index=torch.randint(0, n, (2, e), generator=gen),
                edge_attr=torch.randn(e, 2, generator=gen))  # fmt: skip
    data.time = torch.arange(n) * 3
    return data


def test_partition_into_empty_folder_pyg_time_and_edge_features(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()  # PyG's users (and tests) pass a folder that exists already
    data = _temporal_graph()
    pyg_dist.Partitioner(data, 2, str(root)).generate_partition()
    for pid in range(2):
        nf = torch.load(root / f"part_{pid}" / "node_feats.pt")
        assert torch.equal(nf["time"], data.time)  # PyG: every node's time in every part
        fs = pyg_dist.LocalFeatureStore.from_partition(root, pid)
        names = [a.attr_name for a in fs.get_all_tensor_attrs()]
        assert names[:2] == ["x", "time"] and names[-1] == "y"  # PyG's order, labels last
        assert torch.equal(fs.get_tensor(None, "time"), data.time)
        ids = fs.get_global_id(None)
        assert torch.equal(fs.fetch(ids, None, ["time"])["time"], data.time[ids])
        eid = fs.get_global_id((None, None))
        assert torch.equal(fs.get_tensor((None, None), "edge_attr"), data.edge_attr[eid])


def test_remove_duplicates_keeps_first_occurrences():
    out = SamplerOutput(torch.tensor([0, 4, 1, 5, 1, 6]), None, None, None)
    src, node, _, _ = remove_duplicates(out, torch.tensor([0, 1, 2]))
    assert src.tolist() == [4, 5, 6] and node.tolist() == [0, 1, 2, 4, 5, 6]
    with pytest.raises(ValueError, match="needs `batch`"):
        remove_duplicates(out, torch.tensor([0]), disjoint=True)


def test_loader_accepts_dataloader_arguments_of_pyg_examples(tmp_path, caplog):
    root = tmp_path / "g-partitions"
    pyg_dist.Partitioner(_temporal_graph(), 1, str(root)).generate_partition()
    stores = (pyg_dist.LocalFeatureStore.from_partition(root, 0),
              pyg_dist.LocalGraphStore.from_partition(root, 0))  # fmt: skip
    loader = pyg_dist.DistNeighborLoader(stores, [2], batch_size=8, persistent_workers=True,
                                         pin_memory=False)  # fmt: skip
    batch = next(iter(loader))
    assert repr(loader).startswith("DistNeighborLoader(pid=")
    assert loader.dist_sampler is loader.sampler
    loader.close()
    assert torch.equal(batch.edge_attr, _temporal_graph().edge_attr[batch.e_id])
    pyg_dist.DistNeighborLoader(stores, [2], persistent_workers=False).close()
    assert "has no effect" not in caplog.text  # no sampler process: what PyG's recipe passes
    pyg_dist.DistNeighborLoader(stores, [2], pin_memory=True).close()
    assert "pin_memory=True has no effect" in caplog.text
    from app.distributed.pyg.loader import _refuse  # the rule with sampler processes

    _refuse({"persistent_workers": False}, None, None, None)
    assert "persistent_workers=False has no effect" in caplog.text


def test_with_loader_iterates_one_epoch_and_keeps_the_loader_open(tmp_path):
    """PyG's recipe: `with loader as it: next(it)` initialises a model, then epochs follow."""
    root = tmp_path / "g-partitions"
    pyg_dist.Partitioner(_temporal_graph(), 1, str(root)).generate_partition()
    stores = (pyg_dist.LocalFeatureStore.from_partition(root, 0),
              pyg_dist.LocalGraphStore.from_partition(root, 0))  # fmt: skip
    loader = pyg_dist.DistNeighborLoader(stores, [2], batch_size=8, concurrency=3, shuffle=True)
    every = stores[0].get_global_id().sort().values
    for _ in range(2):
        with loader as it:
            assert next(it).batch_size == 8
        assert loader.channel.empty()  # the batches it had in flight were collected
        seeds = [b.n_id[: b.batch_size] for b in loader]  # a whole epoch after the block
        assert len(seeds) == len(loader) == 5 and torch.equal(torch.cat(seeds).sort().values, every)
    with pytest.raises(RuntimeError, match="in the block"):
        with loader as it:
            next(it)
            raise RuntimeError("in the block")
    with loader as it:
        assert sum(1 for _ in it) == len(loader)
    loader.close()


def test_tensors_put_in_the_script_are_served(tmp_path):
    """A tensor put into the feature store in the script (PyG's recipe adds user features so)
    is in the batches; `tensors_put` is what the loader hands its sampler processes, which
    load the partition's files (tests/compat/test_pyg_scripts.py, num_workers=2)."""
    root = tmp_path / "g-partitions"
    pyg_dist.Partitioner(_temporal_graph(), 1, str(root)).generate_partition()
    stores = (pyg_dist.LocalFeatureStore.from_partition(root, 0),
              pyg_dist.LocalGraphStore.from_partition(root, 0))  # fmt: skip
    assert stores[0].tensors_put() == {}  # what the partition's files hold is not "put"
    z = torch.arange(80.0).view(40, 2)
    stores[0].put_tensor(z, group_name=None, attr_name="z")
    assert list(stores[0].tensors_put()) == [(None, "z")]
    loader = pyg_dist.DistNeighborLoader(stores, [2], batch_size=4)
    batch = next(iter(loader))
    assert torch.equal(batch.z, z[batch.n_id])
    loader.close()
    stores[0].remove_tensor(group_name=None, attr_name="z")
    assert stores[0].tensors_put() == {}


def test_a_tensor_put_after_the_samplers_started_is_refused():
    """Sampler processes get the script's tensors when the first loader starts them; a later
    loader whose store has more is refused in one line (its samplers would lack them)."""
    from app.distributed import workers

    ctx = pyg_dist.DistContext(0, 0, 1, 1, "g").for_partition(1, 0, 2)
    running = workers.Group(ctx, 1.0, users=1, put=frozenset({("user", "x")}))
    workers._current["group"] = running  # what the first loader's join left
    try:
        late = {("user", "x"): torch.ones(1), ("movie", "z"): torch.ones(1)}
        with pytest.raises(ValueError, match=r"\('movie', 'z'\) put into the feature store after"):
            workers.join(ctx, "unused", "127.0.0.1", 1, 1.0, 1.0, 1, late)
        assert workers.join(ctx, "unused", "127.0.0.1", 1, 1.0, 1.0, 1, {}) is running
        assert running.users == 2
    finally:
        del workers._current["group"]


def test_init_rpc_refuses_worker_names():
    from app.distributed import rpc

    ctx = pyg_dist.DistContext(0, 0, 1, 1, "g")
    with pytest.raises(ValueError, match="rpc_worker_names"):
        rpc.init_rpc(ctx, "127.0.0.1", 1, rpc_worker_names={"w": ["a"]})
    with pytest.raises(RuntimeError, match="rpc_register needs RPC"):
        rpc.rpc_register(None)

    @rpc.rpc_require_initialized
    def gather_names() -> list[str]:
        return ["never reached"]

    assert gather_names.__name__ == "gather_names"
    with pytest.raises(RuntimeError, match="gather_names needs RPC: call init_rpc"):
        gather_names()


def test_event_loop_runs_tasks_and_reports_failures():
    from app.distributed.event_loop import ConcurrentEventLoop

    loop = ConcurrentEventLoop(2)
    loop.start_loop()

    async def double(v: int) -> int:
        return 2 * v

    async def fail() -> None:
        raise KeyError("boom")

    got: list[int] = []
    assert loop.run_task(double(4)) == 8
    for v in range(3):
        loop.add_task(double(v), got.append)
    loop.add_task(fail())
    with pytest.raises(KeyError, match="boom"):
        loop.wait_all()
    assert sorted(got) == [0, 2, 4]
    loop.close()


def test_store_and_partitioner_helpers_answer_as_pygs(tmp_path):
    """`LocalFeatureStore.key` / `has_edge_attr` and `Partitioner.is_*_level_time`, asked of
    PyG's own classes on the same partitions and graphs."""
    import warnings

    from torch_geometric.data import HeteroData

    with warnings.catch_warnings():  # PyG's package warns that it is deprecated
        warnings.simplefilter("ignore")
        import torch_geometric.distributed as pyg

    homo = _temporal_graph()  # node time, edge_attr
    hetero = HeteroData()
    hetero["user"].num_nodes, hetero["movie"].x = 6, torch.randn(5, 2)
    hetero["user", "rates", "movie"].edge_index = torch.tensor([[0, 1, 5, 2], [4, 0, 1, 1]])
    hetero["user", "rates", "movie"].time = torch.arange(4)  # edge time
    edge_time = Data(edge_index=torch.tensor([[0, 1], [1, 2]]), edge_time=torch.tensor([3, 4]))
    for data in (homo, hetero, edge_time, Data(x=torch.randn(3, 1))):
        ours, theirs = pyg_dist.Partitioner(data, 2, "unused"), pyg.Partitioner(data, 2, "unused")
        assert ours.is_node_level_time == theirs.is_node_level_time
        assert ours.is_edge_level_time == theirs.is_edge_level_time
    for name, data in (("homo", homo), ("hetero", hetero)):
        root = tmp_path / f"{name}-partitions"
        pyg_dist.Partitioner(data, 1, str(root)).generate_partition()
        ours = pyg_dist.LocalFeatureStore.from_partition(root, 0)
        theirs = pyg.LocalFeatureStore.from_partition(str(root), 0)
        assert ours.has_edge_attr() == theirs.has_edge_attr() == (name == "homo")
        for attr in ours.get_all_tensor_attrs():
            assert ours.key(attr) == theirs.key(attr) == (attr.group_name, attr.attr_name)
            assert torch.equal(ours[ours.key(attr)], theirs[theirs.key(attr)])
