"""Partitioner, on-disk format, validated loading and partition books, on small real graphs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data, HeteroData

from app.partition import (
    DictPartitionBook,
    PartitionError,
    RangePartitionBook,
    load_partition,
    load_partition_book,
    read_meta,
)
from app.partition.assign import symmetric_csr
from app.partition.order import locality_key
from app.partition.writer import partition_graph, stats_for_logging
from tests.helpers.partitions import (
    as_bytes,
    check_edges,
    check_hetero,
    check_homo,
    community_graph,
)


def mag_graph(seed: int = 0) -> HeteroData:
    """An ogbn-mag-shaped graph: features and labels on papers only, reverse edge types."""
    g = torch.Generator().manual_seed(seed)
    sizes = {"paper": 300, "author": 200, "institution": 20, "field_of_study": 40}
    data = HeteroData()
    for t, n in sizes.items():
        data[t].num_nodes = n
    data["paper"].x = torch.randn(300, 5, generator=g)
    data["paper"].y = torch.randint(0, 4, (300,), generator=g)
    split = torch.rand(300, generator=g)
    data["paper"].train_mask = split < 0.6
    data["paper"].val_mask = (split >= 0.6) & (split < 0.8)
    data["paper"].test_mask = split >= 0.8
    rels = [
        ("paper", "cites", "paper", 1500),
        ("author", "writes", "paper", 800),
        ("author", "affiliated_with", "institution", 200),
        ("paper", "has_topic", "field_of_study", 600),
    ]
    for s, r, d, e in rels:
        ei = torch.stack(
            [
                torch.randint(0, sizes[s], (e,), generator=g),
                torch.randint(0, sizes[d], (e,), generator=g),
            ]
        )
        data[s, r, d].edge_index = ei
        if s != d:
            data[d, f"rev_{r}", s].edge_index = ei.flip(0)
    return data


@pytest.mark.parametrize(
    "method,num_parts,relabel",
    [("metis", 2, False), ("metis", 3, True), ("random", 2, False), ("random", 4, True)],
)
def test_homo_partition_invariants(tmp_path, method, num_parts, relabel):
    data = community_graph()
    meta = partition_graph(data, tmp_path / "p", num_parts, method=method, relabel=relabel)
    assert meta.num_parts == num_parts and not meta.reused
    parts = check_homo(data, tmp_path / "p", num_parts)
    book = parts[0].book
    assert isinstance(book, RangePartitionBook if relabel else DictPartitionBook)
    assert meta.stats["edge_cut"] == sum(
        int((p.node_map[p.graph["row"]] != p.index).sum()) for p in parts
    )


@pytest.mark.parametrize("relabel", [False, True])
def test_hetero_partition_invariants(tmp_path, relabel):
    data = mag_graph()
    meta = partition_graph(data, tmp_path / "p", 2, relabel=relabel)
    raw = read_meta(tmp_path / "p")
    assert raw["is_hetero"] and raw["node_types"] == data.node_types
    assert raw["edge_types"] == data.edge_types
    assert meta.stats["edge_cut"] < data.num_edges
    check_hetero(data, tmp_path / "p", 2)


def test_metis_cuts_fewer_edges_than_random(tmp_path):
    data = community_graph(n=800, e=8000)
    metis = partition_graph(data, tmp_path / "m", 4, method="metis")
    rand = partition_graph(data, tmp_path / "r", 4, method="random")
    assert metis.stats["edge_cut_frac"] < 0.5 * rand.stats["edge_cut_frac"]
    train = [r["train"] for r in metis.stats["parts"]]
    assert max(train) < 1.3 * min(train)


def test_temporal_neighbours_sorted_by_source_time(tmp_path):
    data = community_graph()
    partition_graph(data, tmp_path / "p", 2)
    g = load_partition(tmp_path / "p", 0).graph
    t = data.time[g["row"]]
    same_col = g["col"][1:] == g["col"][:-1]
    assert bool((t[1:][same_col] >= t[:-1][same_col]).all())


# ---------------------------------------------------------------- locality order


def test_locality_key_finds_communities_within_parts_and_caps_them():
    """Cliques with shuffled ids: each clique inside one part gets one label of its own; a
    clique split between parts gets one label per side (labels never cross parts); no
    community grows past `max_size`."""
    sizes, perm = [20] * 5 + [30], torch.randperm(130, generator=torch.Generator().manual_seed(1))
    clique = torch.repeat_interleave(torch.arange(6), torch.tensor(sizes))
    pairs = [(i, j) for i in range(130) for j in range(130) if i < j and clique[i] == clique[j]]
    edge_index = perm[torch.tensor(pairs).t()]
    side = torch.where(clique < 3, 0, 1)
    side[torch.arange(130)[clique == 5][:15]] = 0  # the last clique is cut in two
    parts = torch.empty(130, dtype=torch.long)
    parts[perm] = side
    csr = symmetric_csr(edge_index, 130)
    label = locality_key(csr, parts, seed=0)[perm]  # by clique position
    groups = {(int(c), int(s)) for c, s in zip(clique, side, strict=True)}
    assert len(groups) == 7
    for c, s in groups:
        members = label[(clique == c) & (side == s)]
        assert bool((members == members[0]).all()), (c, s)
    assert label.unique().numel() == 7
    capped = locality_key(csr, parts, seed=0, max_size=8)
    assert int(torch.bincount(capped).max()) <= 8


def _mean_id_gap(parts: list) -> float:
    """Mean |source id - destination id| over the edges inside each part."""
    gaps = []
    for part in parts:
        row, col = part.graph["row"].long(), part.graph["col"].long()
        inside = part.node_map[row] == part.index
        gaps.append((row - col)[inside].abs().float())
    return float(torch.cat(gaps).mean())


def test_locality_order_numbers_communities_together(tmp_path):
    """order="locality" writes a valid relabelled partition (every invariant of the original
    order holds) whose intra-part edges join much closer ids: the graph's communities
    interleave in id order (node i is in community i % 8) and come out as blocks."""
    data = community_graph(n=800, e=8000, k=8)
    gap = {}
    for order in ("original", "locality"):
        partition_graph(data, tmp_path / order, 2, relabel=True, order=order)
        gap[order] = _mean_id_gap(check_homo(data, tmp_path / order, 2))
    assert gap["locality"] < 0.5 * gap["original"], gap
    with pytest.raises(ValueError, match="order='locality'"):
        partition_graph(data, tmp_path / "bad", 2, order="locality")


def test_locality_order_hetero(tmp_path):
    """Every node type is renumbered by its communities (the same parts, another order), and
    the partition keeps every invariant."""
    orig, bounds = {}, {}
    for order in ("original", "locality"):
        partition_graph(mag_graph(), tmp_path / order, 2, relabel=True, order=order)
        check_hetero(mag_graph(), tmp_path / order, 2)
        orig[order] = load_partition(tmp_path / order, 0).orig_id
        bounds[order] = read_meta(tmp_path / order)["node_bounds"]
    assert bounds["original"] == bounds["locality"]
    for t in ("paper", "author"):
        a, b = orig["original"][t], orig["locality"][t]
        assert not torch.equal(a, b), t
        for lo, hi in zip(bounds["original"][t][:-1], bounds["original"][t][1:], strict=True):
            same = torch.equal(torch.sort(a[lo:hi]).values, torch.sort(b[lo:hi]).values)
            assert same, (t, lo, hi)  # each part holds the same nodes


# ---------------------------------------------------------------- books


def test_range_and_dict_books_agree(tmp_path):
    data = community_graph()
    partition_graph(data, tmp_path / "r", 3, relabel=True)
    partition_graph(data, tmp_path / "d", 3)
    rbook = load_partition_book(tmp_path / "r")
    dbook = load_partition_book(tmp_path / "d")
    assert isinstance(rbook, RangePartitionBook) and isinstance(dbook, DictPartitionBook)
    assert rbook.num_parts == dbook.num_parts == 3
    ids = torch.randperm(data.num_nodes)
    node_map = torch.load(tmp_path / "r" / "node_map.pt", weights_only=True)
    assert torch.equal(rbook.partition_of(ids), node_map[ids])
    # relabel keeps the assignment: new ids map back to the same parts as the original ids
    orig = torch.load(tmp_path / "r" / "orig_id.pt", weights_only=True)
    new = torch.load(tmp_path / "r" / "new_id.pt", weights_only=True)
    assert torch.equal(orig[new], torch.arange(data.num_nodes))
    assert torch.equal(rbook.partition_of(new[ids]), dbook.partition_of(ids))
    hbook = load_partition_book(partition_graph(mag_graph(), tmp_path / "h", 2).root, "author")
    assert len(hbook) == 200
    with pytest.raises(PartitionError, match="ntype='nope'"):
        load_partition_book(tmp_path / "h", "nope")


def test_range_book_rejects_bad_bounds():
    with pytest.raises(ValueError, match="non-decreasing"):
        RangePartitionBook([0, 5, 3])
    assert RangePartitionBook([0, 2, 2, 5]).partition_of(torch.tensor([0, 1, 2, 4])).tolist() == [
        0,
        0,
        2,
        2,
    ]


# ---------------------------------------------------------------- safety


def test_reuse_mismatch_and_overwrite(tmp_path):
    data, root = community_graph(), tmp_path / "p"
    first = partition_graph(data, root, 2, fingerprint="data-A")
    mtime = (root / "META.json").stat().st_mtime_ns
    again = partition_graph(data, root, 2, fingerprint="data-A")
    assert again.reused and (root / "META.json").stat().st_mtime_ns == mtime
    with pytest.raises(PartitionError) as err:
        partition_graph(data, root, 2, fingerprint="data-B")
    msg = str(err.value)
    assert first.fingerprint in msg and "partition.overwrite=true" in msg
    with pytest.raises(PartitionError, match=first.fingerprint):
        partition_graph(data, root, 3, fingerprint="data-A")
    new = partition_graph(data, root, 3, fingerprint="data-A", overwrite=True)
    assert not new.reused and read_meta(root)["num_parts"] == 3


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    return proc.pid


@pytest.mark.dist
def test_interrupted_run_never_loads_and_is_cleaned(tmp_path):
    root = tmp_path / "p"
    tmp = tmp_path / f"p.tmp-{_dead_pid()}"
    (tmp / "part_0").mkdir(parents=True)
    (tmp / "node_map.pt").write_bytes(b"half")
    with pytest.raises(PartitionError, match="does not exist"):
        load_partition(root, 0)
    partition_graph(community_graph(), root, 2)
    assert not tmp.exists() and load_partition(root, 1).index == 1


def test_failure_while_writing_leaves_no_partition(tmp_path, monkeypatch):
    import app.partition.writer as writer

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(writer, "_write_part", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        partition_graph(community_graph(), tmp_path / "p", 2)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("w") / "p"
    partition_graph(community_graph(), root, 2)
    return root


def _copy(root: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(root, dst)
    return dst


@pytest.mark.parametrize(
    "breakage,match",
    [
        (lambda r: (r / "META.json").unlink(), "META.json missing"),
        (lambda r: (r / "META.json").write_text("{not json"), "not valid JSON"),
        (lambda r: _edit_meta(r, format_version=99), "format_version=99"),
        (lambda r: (r / "part_1" / "graph.pt").unlink(), "graph.pt: file missing"),
        (lambda r: _flip_byte(r / "part_1" / "node_feats.pt"), "node_feats.pt: checksum mismatch"),
        (lambda r: _flip_byte(r / "node_map.pt"), "node_map.pt: checksum mismatch"),
    ],
)
def test_load_errors_name_the_file(written, tmp_path, breakage, match):
    root = _copy(written, tmp_path / "copy")
    breakage(root)
    with pytest.raises(PartitionError, match=match) as err:
        load_partition(root, 1)
    assert "\n" not in str(err.value)


def _edit_meta(root: Path, **changes) -> None:
    meta = json.loads((root / "META.json").read_text())
    meta.update(changes)
    (root / "META.json").write_text(json.dumps(meta))


def _flip_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_load_checks_counts(written):
    with pytest.raises(PartitionError, match="num_parts=2 but the cluster has 4"):
        load_partition(written, 0, expected_num_parts=4)
    with pytest.raises(PartitionError, match="part index 2 out of range"):
        load_partition(written, 2)
    with pytest.raises(PartitionError, match="does not exist"):
        load_partition(written / "missing", 0)


def test_loaded_tensors_are_memory_mapped(written):
    part = load_partition(written, 0)
    assert part.node_feats["feats"]["x"].numel() > 0
    maps = Path("/proc/self/maps").read_text()
    assert str(written / "part_0" / "node_feats.pt") in maps  # shared page cache, no copy


def test_verify_false_skips_checksums(written, tmp_path):
    root = _copy(written, tmp_path / "copy")
    _edit_meta(root, checksums={})
    assert load_partition(root, 0, verify=False).index == 0
    with pytest.raises(PartitionError, match="no checksum"):
        load_partition(root, 0)


def test_stats_for_logging(written):
    flat = stats_for_logging(read_meta(written))
    assert flat["partition/num_parts"] == 2.0
    assert 0 < flat["partition/edge_cut_frac"] < 1
    assert flat["partition/part0_nodes"] + flat["partition/part1_nodes"] == 400
    assert flat["partition/train_imbalance"] >= 1.0
    assert all(isinstance(v, float) for v in flat.values())


# ---------------------------------------------------------------- PyG compatibility


def write_pyg_style(data: Data, root: Path, node_map: torch.Tensor) -> None:
    """A homogeneous partition exactly as PyG 2.8's Partitioner lays it out (no pyg-lib here)."""
    num_parts = int(node_map.max()) + 1
    src, dst = data.edge_index
    edge_map = node_map[dst]
    for p in range(num_parts):
        eid = torch.nonzero(edge_map == p).view(-1)
        perm = torch.sort(dst[eid], stable=True).indices
        eid = eid[perm]
        part = root / f"part_{p}"
        part.mkdir(parents=True)
        graph = {"edge_id": eid, "row": src[eid], "col": dst[eid], "size": (data.num_nodes,) * 2}
        torch.save(graph, part / "graph.pt")
        ids = torch.nonzero(node_map == p).view(-1)
        torch.save({"global_id": ids, "feats": dict(x=data.x[ids])}, part / "node_feats.pt")
        torch.save(defaultdict(), part / "edge_feats.pt")
    torch.save(node_map, root / "node_map.pt")
    torch.save(edge_map, root / "edge_map.pt")
    meta = {
        "num_parts": num_parts,
        "node_types": None,
        "edge_types": None,
        "node_offset": None,
        "is_hetero": False,
        "is_sorted": True,
    }
    (root / "META.json").write_text(json.dumps(meta))


def test_pyg_written_partition_loads(tmp_path):
    data = community_graph()
    node_map = torch.arange(data.num_nodes) % 2
    write_pyg_style(data, tmp_path / "pyg", node_map)
    parts = [load_partition(tmp_path / "pyg", p, expected_num_parts=2) for p in range(2)]
    assert all(p.legacy and p.seeds == {} for p in parts)
    edges = []
    for p, part in enumerate(parts):
        edges.extend(check_edges(data, part.graph, (node_map, node_map), p, None, None))
        assert as_bytes(part.node_feats["feats"]["x"]) == as_bytes(data.x[node_map == p])
    assert sorted(edges) == list(range(data.num_edges))


def test_our_partition_loads_in_pyg_stores(tmp_path):
    from torch_geometric.distributed import LocalFeatureStore, LocalGraphStore

    data = community_graph()
    partition_graph(data, tmp_path / "p", 2)
    graph_store = LocalGraphStore.from_partition(str(tmp_path / "p"), 1)
    feat_store = LocalFeatureStore.from_partition(str(tmp_path / "p"), 1)
    ours = load_partition(tmp_path / "p", 1)
    (edge_attr,) = graph_store.get_all_edge_attrs()
    edge_index = graph_store.get_edge_index(edge_attr)
    assert torch.equal(edge_index[1], ours.graph["col"])
    ids = ours.node_feats["global_id"]
    assert torch.equal(feat_store.get_global_id(None), ids)
    assert torch.equal(feat_store.get_tensor(None, "x"), data.x[ids])

    hetero = mag_graph()
    partition_graph(hetero, tmp_path / "h", 2)
    store = LocalGraphStore.from_partition(str(tmp_path / "h"), 0)
    assert {a.edge_type for a in store.get_all_edge_attrs()} == set(hetero.edge_types)


# ---------------------------------------------------------------- task


def test_ensure_partition_reuses_without_loading(tmp_path, monkeypatch):
    import app.partition.task as task
    from app.config import to_config
    from app.partition.spec import PartitionSpec

    monkeypatch.setattr(task, "_dataset_fingerprint", lambda spec: "fp-test")
    cfg = to_config(_cfg_dict(tmp_path))
    root = task.ensure_partition(PartitionSpec.from_config(cfg), data=community_graph())
    assert (
        root == task.partition_root(PartitionSpec.from_config(cfg))
        and root.parent == tmp_path / "partitions"
    )
    assert root.name.startswith("synthetic_products-") and root.name.endswith("-metis-p2")

    def no_dataset(*args):
        raise AssertionError("the dataset must not be loaded to reuse a partition")

    monkeypatch.setitem(sys.modules, "app.dataset", type(sys)("app.dataset"))
    sys.modules["app.dataset"].load_dataset = no_dataset
    stats = task.run_partition_task(cfg)
    assert stats["partition/num_parts"] == 2.0
    relabel = PartitionSpec.from_config(
        to_config({**_cfg_dict(tmp_path), "partition": {"relabel": True}})
    )
    assert task.partition_root(relabel).name.endswith("-p2-relabel")
    local = PartitionSpec.from_config(
        to_config({**_cfg_dict(tmp_path), "partition": {"relabel": True, "order": "locality"}})
    )
    assert task.partition_root(local).name.endswith("-p2-relabel-locality")
    assert task.config_fingerprint(local) != task.config_fingerprint(relabel)


def _cfg_dict(tmp_path) -> dict:
    return {
        "output_dir": str(tmp_path),
        "cluster": {"num_nodes": 2},
        "task": "partition",
        "model": {"num_layers": 2},
        "sampler": {"num_neighbors": [5, 5]},
    }


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"method": "spectral"}, "partition.method='spectral'"),
        ({"num_parts": 0}, "partition.num_parts=0"),
        ({"num_parts": 10_000}, "partition.num_parts=10000"),
    ],
)
def test_bad_parameters_fail_early_and_leave_nothing(tmp_path, kwargs, match):
    args = {"num_parts": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        partition_graph(community_graph(), tmp_path / "p", **args)
    assert list(tmp_path.iterdir()) == []
