"""PyG's `torch_geometric.distributed` surface on this package, in one process (issue 14):
`Partitioner` and PyG's side files, `DistContext` from PyG's five fields, the graph store's
layouts, labels from a label file, and the loader's PyG arguments (honoured or refused)."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

import app.distributed as pyg_dist
from app.partition.pyg import label_file, read_labels, split_file, write_side_files
from tests.helpers.ports import free_port


def _graph(with_y: bool = True) -> Data:
    gen = torch.Generator().manual_seed(0)
    n = 60
    data = Data(x=torch.randn(n, 4, generator=gen),
                edge_index=torch.randint(0, n, (2, 300), generator=gen))  # fmt: skip
    data.train_mask = torch.arange(n) % 2 == 0
    if with_y:
        data.y = torch.arange(n) % 3
    return data


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """(root with y, root without y) of the same graph, each in two parts."""
    out = tmp_path_factory.mktemp("pyg")
    roots = []
    for name, with_y in (("full", True), ("bare", False)):
        root = out / f"{name}-partitions"
        pyg_dist.Partitioner(_graph(with_y), 2, str(root)).generate_partition()
        roots.append(root)
    return roots


def test_partitioner_writes_pyg_layout_and_side_files(parts):
    root = parts[0]
    meta, num_parts, idx, node_pb, edge_pb = pyg_dist.load_partition_info(root, 1)
    assert (num_parts, idx, meta["is_hetero"]) == (2, 1, False)
    assert edge_pb.numel() == 300 and node_pb.numel() == 60 and node_pb.max() == 1  # PyG: tensors
    files = write_side_files(root)
    assert label_file(root) in files and label_file(root).parent.name == "full-label"
    assert torch.equal(read_labels(root), torch.arange(60) % 3)
    train = torch.cat([torch.load(split_file(root, "train", i)) for i in range(2)])
    assert torch.equal(train.sort().values, torch.arange(0, 60, 2))


def test_partitioner_refuses_bad_arguments():
    with pytest.raises(ValueError, match="num_parts=0"):
        pyg_dist.Partitioner(_graph(), 0, "unused")
    with pytest.raises(TypeError, match="Data or HeteroData"):
        pyg_dist.Partitioner({"x": 1}, 2, "unused")


def test_dist_context_from_pyg_fields():
    ctx = pyg_dist.DistContext(rank=1, global_rank=1, world_size=2, global_world_size=2,
                               group_name="g")  # fmt: skip
    ctx.rank = 1  # not frozen, as PyG's
    full = ctx.for_partition(num_partitions=2, partition_idx=1, num_workers=2)
    assert (full.name, full.global_rank, full.global_world_size) == ("trainer1-0", 3, 6)
    assert [full.sampler(w).name for w in range(2)] == ["sampler1-0-0", "sampler1-0-1"]
    assert [full.sampler(w).global_rank for w in range(2)] == [4, 5]
    assert full.for_partition(2, 1, 2) is full
    with pytest.raises(ValueError, match="does not belong to partition 0"):
        ctx.for_partition(num_partitions=2, partition_idx=0, num_workers=0)
    with pytest.raises(ValueError, match="not a multiple of the partition count 2"):
        pyg_dist.DistContext(0, 0, 3, 3, "g").for_partition(2, 0, 0)
    with pytest.raises(ValueError, match="global_world_size=4"):
        pyg_dist.DistContext(0, 0, 2, 4, "g").for_partition(2, 0, 0)


def test_graph_store_layouts(parts):
    gs = pyg_dist.LocalGraphStore.from_partition(parts[0], 0)
    row, col = gs.get_edge_index(edge_type=None, layout="coo")
    owned = gs.get_global_id()
    edges = _graph().edge_index[:, owned]
    assert torch.equal(row.long(), edges[0]) and torch.equal(col, edges[1])
    rowptr, csr_col = gs.get_edge_index(edge_type=None, layout="csr")
    assert rowptr.numel() == 61 and int(rowptr[-1]) == owned.numel()
    assert sorted(zip(row.tolist(), col.tolist(), strict=True)) == sorted(
        (r, int(c)) for r in range(60) for c in csr_col[rowptr[r] : rowptr[r + 1]]
    )


def test_labels_come_from_the_label_file(parts):
    root = parts[1]
    torch.save(torch.arange(60) % 3, label_file(root).parent.mkdir() or label_file(root))
    stores = (pyg_dist.LocalFeatureStore.from_partition(root, 0),
              pyg_dist.LocalGraphStore.from_partition(root, 0))  # fmt: skip
    loader = pyg_dist.DistNeighborLoader(stores, [0], batch_size=8)  # owned only
    batch = next(iter(loader))
    loader.close()
    assert torch.equal(batch.y, batch.n_id % 3)


def test_loader_positional_order_and_refusals(parts):
    stores = (pyg_dist.LocalFeatureStore.from_partition(parts[0], 0),
              pyg_dist.LocalGraphStore.from_partition(parts[0], 0))  # fmt: skip
    ids = stores[0].get_global_id()[:4]
    loader = pyg_dist.DistNeighborLoader(stores, [0], "127.0.0.1", None, None, ids, batch_size=4,
                                         async_sampling=False, device="cpu")  # fmt: skip
    assert torch.equal(next(iter(loader)).n_id[:4], ids)
    with pytest.raises(ValueError, match="needs sampler processes"):
        with loader.enable_multithreading(2):
            pass
    loader.close()
    loader.close()  # idempotent
    with pytest.raises(TypeError, match="prefetch_factor=4 is not supported"):
        pyg_dist.DistNeighborLoader(stores, [2], prefetch_factor=4)
    with pytest.raises(ValueError, match="channel"):
        pyg_dist.DistNeighborLoader(stores, [2], channel=object())
    with pytest.raises(ValueError, match="rpc_worker_names"):
        pyg_dist.DistNeighborLoader(stores, [2], rpc_worker_names={"a": ["b"]})


def test_feature_store_helpers(parts):
    fs = pyg_dist.LocalFeatureStore.from_partition(parts[0], 1)
    ids = fs.get_global_id()[[2, 0]]
    rows = fs.get_tensor_from_global_id(group_name=None, attr_name="x", index=ids)
    assert torch.equal(rows, _graph().x[ids])
    assert fs.edge_feat_pb.numel() == 300


def test_pyg_stores_over_the_cores_a_sampler_process_loads(parts):
    """PyG's `from_partition` gives PyG's store types (its API and loaders take them); a
    sampler process loads the PyG-free cores (`server.load_stores`), which read the same."""
    from torch_geometric.data import EdgeAttr, EdgeLayout, FeatureStore, GraphStore

    from app.distributed.server import load_stores

    gs = pyg_dist.LocalGraphStore.from_partition(parts[0], 0)
    fs = pyg_dist.LocalFeatureStore.from_partition(parts[0], 0)
    assert isinstance(gs, GraphStore) and isinstance(fs, FeatureStore)
    (attr,) = gs.get_all_edge_attrs()
    assert isinstance(attr, EdgeAttr) and attr.layout == EdgeLayout.COO and attr.is_sorted
    core_fs, core_gs = load_stores(parts[0], 0)
    assert not isinstance(core_gs, GraphStore) and not isinstance(core_fs, FeatureStore)
    for key in ("colptr", "row", "edge_id"):
        assert torch.equal(core_gs.csc()[key], gs.csc()[key])
    x = fs.get_tensor(group_name=None, attr_name="x")
    assert torch.equal(core_fs.attr(None, "x"), x)
    core_fs.put_attr(x + 1, None, "x2")  # what a sampler is given of the script's put_tensor
    assert torch.equal(core_fs.tensors_put()[(None, "x2")], x + 1)
    with pytest.raises(KeyError, match="no attribute 'z'"):
        core_fs.attr(None, "z")


@pytest.mark.dist
def test_loaders_own_rpc_until_the_last_is_gone(tmp_path):
    """A hand-launched (PyG-context) loader joins RPC itself; closing one of two loaders keeps
    it, garbage-collecting the last one leaves it (no launcher, no explicit shutdown)."""
    import gc

    from app.distributed import rpc

    root = tmp_path / "one-partitions"
    pyg_dist.Partitioner(_graph(), 1, str(root)).generate_partition()
    stores = (pyg_dist.LocalFeatureStore.from_partition(root, 0),
              pyg_dist.LocalGraphStore.from_partition(root, 0))  # fmt: skip
    port = free_port()
    ctx = pyg_dist.DistContext(rank=0, global_rank=0, world_size=1, global_world_size=1,
                               group_name="g")  # fmt: skip
    first = pyg_dist.DistNeighborLoader(stores, [2], "127.0.0.1", port, ctx, batch_size=16)
    second = pyg_dist.DistNeighborLoader(stores, [2], "127.0.0.1", port + 1, ctx, batch_size=16)
    assert rpc.current_name() == "trainer0-0"
    with pytest.raises(ValueError, match="num_workers=2: this process already runs 0"):
        pyg_dist.DistNeighborLoader(stores, [2], "127.0.0.1", port, ctx, num_workers=2)
    with first as it:  # PyG's: one epoch's iterator; the loader stays open
        assert next(it).y is not None
    first.close()
    assert rpc.is_initialized(), "closing one loader must not end RPC for the other"
    assert len(list(second)) == 4
    del second
    gc.collect()
    assert not rpc.is_initialized(), "the last loader's collection must leave RPC"
