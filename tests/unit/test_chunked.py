"""The chunked on-disk graph: streamed generation equals the in-memory generator, conversion
round trip, fixed-size chunks, and incomplete folders that never load."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from app.config import DatasetConfig
from app.dataset import synthetic_stream
from app.dataset.chunked import ChunkedGraph, ChunkedGraphError, ChunkedWriter, write_data
from app.dataset.synthetic import generate_products
from app.partition.spec import PartitionSpec


def _edges(graph: ChunkedGraph) -> np.ndarray:
    return np.concatenate([np.stack([s, d]) for _, s, d in graph.edge_chunks()], axis=1)


@pytest.mark.parametrize("temporal", [False, True])
def test_streamed_generator_equals_in_memory(tmp_path, monkeypatch, temporal):
    monkeypatch.setattr(synthetic_stream, "BUCKET_KEYS", 3000)  # many buckets, several rounds
    cfg = DatasetConfig(
        num_nodes=6000, avg_degree=12, num_features=5, num_classes=4, temporal=temporal
    )
    ref = generate_products(cfg, 7)
    graph = ChunkedGraph(synthetic_stream.generate_products_chunked(cfg, 7, tmp_path / "g"))
    assert graph.sorted_by_src and graph.symmetric
    assert graph.manifest["num_classes"] == 4 and graph.num_features == 5
    assert np.array_equal(_edges(graph), ref["edge_index"].numpy())
    for name in ("x", "y", "train_mask", "val_mask", "test_mask", "time"):
        if name in ref:
            assert np.array_equal(graph.node_array(name), ref[name].numpy()), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"], "spill files left behind"


def test_convert_round_trip_in_fixed_chunks(tmp_path):
    gen = torch.Generator().manual_seed(0)
    n, e = 500, 2345
    data = Data(
        x=torch.randn(n, 3, generator=gen),
        y=torch.randint(0, 4, (n,), generator=gen),
        edge_index=torch.randint(0, n, (2, e), generator=gen),
        train_mask=torch.rand(n, generator=gen) < 0.3,
    )
    graph = ChunkedGraph(write_data(data, tmp_path / "g", chunk_edges=1000, chunk_nodes=200))
    counts = [c["count"] for c in graph.manifest["edges"]["chunks"]]
    assert counts == [1000, 1000, 345]
    assert [c["count"] for c in graph.manifest["nodes"]["x"]["chunks"]] == [200, 200, 100]
    assert not graph.sorted_by_src and not graph.symmetric
    assert np.array_equal(_edges(graph), data.edge_index.numpy())
    assert graph.num_nodes == n and graph.num_edges == e
    assert np.array_equal(graph.node_array("train_mask"), data.train_mask.numpy())
    assert graph.node_array("val_mask") is None
    ids = np.array([0, 7, 260, 499])
    assert np.array_equal(graph.gather_rows("x", ids), data.x.numpy()[ids])


def test_incomplete_folder_never_loads(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with ChunkedWriter(tmp_path / "g", 10, chunk_edges=2) as out:
            out.add_edges(np.arange(5), np.arange(5))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == [], "an interrupted writer left files"
    (tmp_path / "g").mkdir()
    with pytest.raises(ChunkedGraphError, match="manifest.json missing"):
        ChunkedGraph(tmp_path / "g")


def test_node_rows_must_cover_every_node(tmp_path):
    with pytest.raises(ChunkedGraphError, match="'y' has 3 rows, not 4"):
        with ChunkedWriter(tmp_path / "g", 4) as out:
            out.add_nodes("y", np.arange(3))
            out.finish()


# ---------------------------------------------------------------- trust (issue 28, finding 1)


def _small(tmp_path) -> ChunkedGraph:
    gen = torch.Generator().manual_seed(1)
    n = 400
    data = Data(
        x=torch.randn(n, 3, generator=gen),
        y=torch.randint(0, 4, (n,), generator=gen),
        edge_index=torch.randint(0, n, (2, 3000), generator=gen),
        train_mask=torch.rand(n, generator=gen) < 0.3,
    )
    return ChunkedGraph(write_data(data, tmp_path / "g", chunk_edges=1000, chunk_nodes=150))


def _rewrite_chunk(graph: ChunkedGraph, index: int, edit, resign: bool) -> None:
    """Edit edge chunk `index` in place; `resign`: also record its new checksum (an input
    that is consistent but wrong, as a buggy converter would write it)."""
    from app.dataset.chunked import _save_chunk

    chunk = graph.manifest["edges"]["chunks"][index]
    arr = np.load(graph.root / chunk["file"])
    edit(arr)
    trust = _save_chunk(graph.root / chunk["file"], arr)
    if resign:
        chunk.update(trust)
        (graph.root / "manifest.json").write_text(json.dumps(graph.manifest))


def _partition(graph: ChunkedGraph, root):
    from app.partition.stream import stream_partition

    args = {"params": {}, "fingerprint": "fp", "dataset_fingerprint": "d"}
    return stream_partition(ChunkedGraph(graph.root), root, 2, **args)


def test_manifest_holds_a_checksum_and_size_per_chunk(tmp_path):
    graph = _small(tmp_path)
    for chunk in graph._chunks():
        path = graph.root / chunk["file"]
        assert chunk["bytes"] == path.stat().st_size
        assert len(chunk["xxh3"]) == 16


def test_flipped_bit_in_an_edge_chunk_is_refused(tmp_path):
    graph = _small(tmp_path)

    def flip(arr):
        arr[0, 17] ^= 1

    _rewrite_chunk(graph, 1, flip, resign=False)
    with pytest.raises(ChunkedGraphError, match=r"edges/000001.npy: checksum mismatch"):
        _partition(graph, tmp_path / "p")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"], "tmp folder left behind"


@pytest.mark.parametrize("bad", [0x7FFFFFFF, 400, -3])
def test_out_of_range_id_is_one_line_naming_chunk_and_value(tmp_path, bad):
    graph = _small(tmp_path)

    def poke(arr):
        arr[0, 5] = bad

    _rewrite_chunk(graph, 2, poke, resign=True)
    match = rf"edge chunk .*edges/000002.npy: node id {bad} out of range \[0, 400\)"
    with pytest.raises(ChunkedGraphError, match=match) as err:
        _partition(graph, tmp_path / "p")
    assert "\n" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"], "tmp folder left behind"


def test_writer_refuses_out_of_range_ids(tmp_path):
    with pytest.raises(ChunkedGraphError, match=r"node id 10 out of range \[0, 10\)"):
        with ChunkedWriter(tmp_path / "g", 10) as out:
            out.add_edges(np.array([1, 2]), np.array([3, 10]))
    assert list(tmp_path.iterdir()) == []


def test_truncated_chunk_is_one_line_at_open(tmp_path):
    graph = _small(tmp_path)
    path = graph.root / "edges/000001.npy"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ChunkedGraphError, match=r"edges/000001.npy: \d+ bytes, the manifest says"):
        ChunkedGraph(graph.root)
    path.write_bytes(path.read_bytes() + b"\0" * 100)  # the right size again: bad content
    with pytest.raises(ChunkedGraphError, match=r"edges/000001.npy: checksum mismatch"):
        list(ChunkedGraph(graph.root).edge_chunks())
    (graph.root / "nodes/x/000002.npy").unlink()
    with pytest.raises(ChunkedGraphError, match=r"nodes/x/000002.npy: chunk missing"):
        ChunkedGraph(graph.root)


@pytest.mark.dist
def test_killed_generation_leaves_nothing_after_the_next_run(tmp_path):
    """A generator killed by SIGKILL runs no cleanup: the next writer of that root removes
    its `.tmp-<pid>` / `.spill-<pid>` once the pid is gone."""
    import subprocess
    import sys

    from tests.helpers.jobs import REPO

    script = (
        "import os, sys\n"
        "from app.config import DatasetConfig\n"
        "from app.dataset import synthetic_stream as s\n"
        "real = s.write_symmetric_edges\n"
        "def stop(*a):\n"
        "    print('spilled', flush=True); os.kill(os.getpid(), 9)\n"
        "s.write_symmetric_edges = stop\n"
        "s.generate_products_chunked(DatasetConfig(num_nodes=3000), 0, sys.argv[1])\n"
    )
    root = tmp_path / "chunked"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(root)], cwd=REPO, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == -9 and "spilled" in proc.stdout, proc.stderr[-2000:]
    left = sorted(p.name.split("-")[0] for p in tmp_path.iterdir())
    assert left == ["chunked.spill", "chunked.tmp"], left
    synthetic_stream.generate_products_chunked(DatasetConfig(num_nodes=3000), 0, root)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chunked"]


@pytest.mark.dist
def test_partition_cli_on_a_bad_chunk_is_one_line_and_no_run_left_running(tmp_path):
    """`task=partition partition=stream` on a chunked copy with an out-of-range id: rc 1,
    one line naming the chunk and the value, no tmp folder (and no MLflow run: a partition-only
    task opens no store, tests/unit/test_cli.py)."""
    import app.partition.task as task
    from app.config import to_config
    from tests.helpers.jobs import run_app

    args = [
        "task=partition", "partition=stream", "cluster.num_nodes=2", f"output_dir={tmp_path}",
        "dataset.num_nodes=3000", "dataset.num_features=8", f"dataset.root={tmp_path}/data",
        "model.num_layers=2", "sampler.num_neighbors=[5,5]",
    ]  # fmt: skip
    cfg = to_config({
        "output_dir": str(tmp_path), "cluster": {"num_nodes": 2}, "task": "partition",
        "model": {"num_layers": 2}, "sampler": {"num_neighbors": [5, 5]},
        "dataset": {"root": str(tmp_path / "data"), "num_nodes": 3000, "num_features": 8},
        "partition": {"method": "stream"},
    })  # fmt: skip
    graph = ChunkedGraph(task.ensure_chunked(PartitionSpec.from_config(cfg)))

    def poke(arr):
        arr[0, 9] = 0x7FFFFFFF

    _rewrite_chunk(graph, 0, poke, resign=True)
    proc = run_app(*args, timeout=180)
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if "Error" in ln or "error" in ln]
    assert lines == [lines[-1]] and "edges/000000.npy: node id 2147483647 out of range" in lines[0]
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "partitions").glob("*.tmp-*"))
    assert not (tmp_path / "mlflow.db").exists()  # a partition-only task opens no store


def test_a_manifest_whose_num_nodes_disagrees_with_its_chunks_is_one_line(tmp_path):
    """Issue 37 (6): an edited `num_nodes` is refused naming the manifest (a numpy broadcast
    error deep in partitioning before)."""
    graph = _small(tmp_path)
    manifest = graph.root / "manifest.json"
    meta = json.loads(manifest.read_text())
    meta["num_nodes"] += 100
    manifest.write_text(json.dumps(meta))
    with pytest.raises(ChunkedGraphError) as err:
        ChunkedGraph(graph.root)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{manifest}: num_nodes=500 but the chunks of its ")
    assert "hold 400" in msg, msg
