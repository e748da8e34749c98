"""Trust (issue 37, item 2): labels outside [0, dataset.num_classes) are refused in one line
naming the file and the count, at generation, at partitioning and at load; -1 marks an
unlabelled node and is allowed outside train/val/test only; num_classes is the dataset's,
never max(y) + 1."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from app.config import Config, DatasetConfig
from app.dataset import synthetic_stream
from app.dataset.chunked import ChunkedGraph, ChunkedWriter, _save_chunk, write_data
from app.labels import LabelError
from app.partition.reader import read_meta
from app.partition.stream import stream_partition
from app.partition.writer import partition_graph
from app.runtime import Runtime
from app.task.local import LocalSource
from app.task.partitioned import PartitionSource

NUM_CLASSES = 47


@pytest.fixture(scope="module")
def chunked(tmp_path_factory):
    """A 47-class chunked graph, as `partition=stream` generates it."""
    cfg = DatasetConfig(num_nodes=3000, avg_degree=8, num_features=4, num_classes=NUM_CLASSES)
    return synthetic_stream.generate_products_chunked(cfg, 0, tmp_path_factory.mktemp("g") / "g")


def _with_labels(src, tmp_path, edit) -> ChunkedGraph:
    """A copy of chunked graph `src` whose first y chunk `edit` changed, re-signed (a
    consistent but wrong input, as a buggy converter writes it)."""
    import shutil

    root = shutil.copytree(src, tmp_path / "g")
    graph = ChunkedGraph(root)
    chunk = graph.manifest["nodes"]["y"]["chunks"][0]
    y = np.load(graph.root / chunk["file"])
    train = np.concatenate([rows for _, rows in graph.node_chunks("train_mask")])
    edit(y, train[: len(y)])
    chunk.update(_save_chunk(graph.root / chunk["file"], y))
    (graph.root / "manifest.json").write_text(json.dumps(graph.manifest))
    return ChunkedGraph(root)


def _stream(graph: ChunkedGraph, root):
    args = {"params": {}, "fingerprint": "fp", "dataset_fingerprint": "d"}
    return stream_partition(graph, root, 2, **args)


def test_generation_refuses_out_of_range_labels_naming_the_chunk(tmp_path):
    y = np.zeros(10, np.int64)
    y[[2, 5, 7]] = 1000
    with pytest.raises(LabelError) as err:
        with ChunkedWriter(tmp_path / "g", 10) as out:
            out.add_nodes("y", y)
            out.finish(num_classes=NUM_CLASSES)
    msg = str(err.value)
    assert "\n" not in msg and "nodes/y/000000.npy: 3 of 10 labels outside [0, 47)" in msg, msg
    assert list(tmp_path.iterdir()) == [], "a refused graph was installed"


def test_partitioning_refuses_y_1000_in_a_47_class_chunked_graph(chunked, tmp_path):
    def poke(y, train):
        y[:5] = 1000

    with pytest.raises(LabelError) as err:
        _stream(_with_labels(chunked, tmp_path, poke), tmp_path / "P")
    msg = str(err.value)
    assert "\n" not in msg and f"{tmp_path / 'g' / 'nodes' / 'y'}: 5 of 3000 labels" in msg, msg
    assert "values 1000..1000" in msg and "dataset.num_classes=47" in msg
    assert not (tmp_path / "P").exists()


def test_partitioning_refuses_y_minus_1_on_a_training_node(chunked, tmp_path):
    def unlabel_train(y, train):
        y[np.flatnonzero(train)[:4]] = -1

    with pytest.raises(LabelError, match=r"y: 4 of 3000 labels outside \[0, 47\)"):
        _stream(_with_labels(chunked, tmp_path, unlabel_train), tmp_path / "P")


def test_minus_1_outside_the_splits_is_unlabelled_and_partitions(tmp_path):
    """-1 marks an unlabelled node (PyG users' sentinel): allowed where no loss reads it."""
    n = 300
    gen = torch.Generator().manual_seed(0)
    train = torch.arange(n) < n // 2
    y = torch.where(train, torch.randint(0, NUM_CLASSES, (n,), generator=gen), -1)
    data = Data(x=torch.randn(n, 4, generator=gen), y=y, train_mask=train)
    data.edge_index = torch.randint(0, n, (2, 1500), generator=gen)
    data.num_classes = NUM_CLASSES
    graph = ChunkedGraph(write_data(data, tmp_path / "g"))
    meta = _stream(graph, tmp_path / "P")
    assert read_meta(meta.root)["num_classes"] == NUM_CLASSES
    partition_graph(data, tmp_path / "M", 2, method="random")  # the in-memory writer agrees
    assert read_meta(tmp_path / "M")["num_classes"] == NUM_CLASSES


def _runtime(root) -> Runtime:
    return Runtime("trainer", 0, 1, 0, 1, -1, 0, "127.0.0.1", 0, 0, "", "", str(root))


def test_load_takes_num_classes_from_the_config_and_refuses_labels_above_it(tmp_path):
    """A partition without a recorded class count (written from a graph that declares none):
    the trainer uses dataset.num_classes, not max(y) + 1, and refuses y = 1000 naming its part
    file."""
    n = 200
    y = torch.randint(0, 5, (n,), generator=torch.Generator().manual_seed(0))
    y[:3] = 1000
    edge_index = torch.randint(0, n, (2, 1000), generator=torch.Generator().manual_seed(1))
    data = Data(x=torch.randn(n, 4), y=y, edge_index=edge_index, train_mask=torch.ones(n).bool())
    partition_graph(data, tmp_path / "P", 1, method="random")  # declared: none, so no check
    assert read_meta(tmp_path / "P").get("num_classes") is None
    cfg = Config()
    cfg.dataset.num_classes = NUM_CLASSES
    source = PartitionSource(_runtime(tmp_path / "P"), cfg)
    with pytest.raises(LabelError) as err:
        source.schema()
    msg = str(err.value)
    assert "\n" not in msg and f"{tmp_path / 'P' / 'part_0' / 'node_feats.pt'}: 3 of" in msg, msg
    data.y[:3] = 2
    partition_graph(data, tmp_path / "Q", 1, method="random")
    assert PartitionSource(_runtime(tmp_path / "Q"), cfg).schema().num_classes == NUM_CLASSES


def test_a_local_graph_uses_its_declared_class_count_and_refuses_labels_above_it():
    n = 100
    data = Data(x=torch.randn(n, 4), y=torch.zeros(n, dtype=torch.long))
    data.edge_index = torch.randint(0, n, (2, 400))
    data.num_classes = NUM_CLASSES
    cfg = Config()
    assert LocalSource(cfg, data).schema().num_classes == NUM_CLASSES  # not max(y) + 1 == 1
    data.y[:7] = 1000
    with pytest.raises(LabelError, match="7 of 100 labels outside"):
        LocalSource(cfg, data).schema()


def test_the_in_memory_partitioner_refuses_labels_above_the_declared_count(tmp_path):
    n = 100
    data = Data(x=torch.randn(n, 4), y=torch.zeros(n, dtype=torch.long))
    data.edge_index = torch.randint(0, n, (2, 400))
    data.num_classes = NUM_CLASSES
    data.y[:2] = 1000
    with pytest.raises(LabelError, match=r"labels y \(partitioning into .*\): 2 of 100 labels"):
        partition_graph(data, tmp_path / "P", 2, method="random")
    assert not (tmp_path / "P").exists()


@pytest.mark.dist
def test_partition_cli_on_y_1000_is_one_line_naming_the_file_and_count(tmp_path):
    """The issue's case end to end: `task=partition partition=stream` of a 47-class chunked
    graph with y = 1000 on 5 nodes: rc 1, one line, nothing installed."""
    import app.partition.task as task
    from app.config import to_config
    from app.partition.spec import PartitionSpec
    from tests.helpers.jobs import run_app

    args = [
        "task=partition", "partition=stream", "cluster.num_nodes=2", f"output_dir={tmp_path}",
        "dataset.num_nodes=3000", "dataset.num_features=8", f"dataset.root={tmp_path}/data",
        "model.num_layers=2", "sampler.num_neighbors=[5,5]", "mlflow.enabled=false",
    ]  # fmt: skip
    cfg = to_config({
        "output_dir": str(tmp_path), "cluster": {"num_nodes": 2}, "task": "partition",
        "model": {"num_layers": 2}, "sampler": {"num_neighbors": [5, 5]},
        "dataset": {"root": str(tmp_path / "data"), "num_nodes": 3000, "num_features": 8},
        "partition": {"method": "stream"},
    })  # fmt: skip
    root = task.ensure_chunked(PartitionSpec.from_config(cfg))
    graph = ChunkedGraph(root)
    chunk = graph.manifest["nodes"]["y"]["chunks"][0]
    y = np.load(root / chunk["file"])
    y[:5] = 1000
    chunk.update(_save_chunk(root / chunk["file"], y))
    (root / "manifest.json").write_text(json.dumps(graph.manifest))
    proc = run_app(*args, timeout=180)
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()[-1:]
    assert line.startswith("partition error: ") and "Traceback" not in proc.stderr, proc.stderr
    assert f"{root / 'nodes' / 'y'}: 5 of 3000 labels outside [0, 47)" in line, line
    assert not list((tmp_path / "partitions").glob("*/META.json"))
