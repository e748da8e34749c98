"""`dataset.feature_dtype=float16`: features narrow on disk, in parts and stores; float32 maths."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from app.config import ConfigError, DatasetConfig
from app.dataset import dataset_fingerprint, load_dataset
from app.dataset.chunked import ChunkedGraph
from app.dataset.synthetic_stream import generate_products_chunked
from app.distributed import LocalFeatureStore
from app.model.gnn import SampledGNN
from app.partition.reader import load_partition
from app.partition.stream import stream_partition
from app.partition.writer import partition_graph
from tests.helpers.papers import write_tiny_papers100m

torch.set_num_threads(1)


def cfg_for(tmp_path, dtype: str) -> DatasetConfig:
    return DatasetConfig(
        name="synthetic_products", root=str(tmp_path), num_nodes=3000, num_features=24,
        feature_dtype=dtype,
    )  # fmt: skip


def test_float16_is_the_float32_graph_rounded(tmp_path):
    wide = load_dataset(cfg_for(tmp_path, "float32"), seed=0)
    narrow = load_dataset(cfg_for(tmp_path, "float16"), seed=0)
    assert wide.x.dtype == torch.float32 and narrow.x.dtype == torch.float16
    assert torch.equal(narrow.x, wide.x.half())  # the same draws, rounded
    assert torch.equal(narrow.edge_index, wide.edge_index) and torch.equal(narrow.y, wide.y)
    fp16, fp32 = (dataset_fingerprint(cfg_for(tmp_path, d), 0) for d in ("float16", "float32"))
    assert fp16 != fp32  # its own cache and partitions


def test_float16_chunks_equal_the_in_memory_graph(tmp_path):
    cfg = cfg_for(tmp_path, "float16")
    graph = ChunkedGraph(generate_products_chunked(cfg, 0, tmp_path / "chunked"))
    assert graph.manifest["nodes"]["x"]["dtype"] == "float16"
    assert np.array_equal(graph.node_array("x"), load_dataset(cfg, seed=0).x.numpy())


@pytest.mark.parametrize("method", ["metis", "stream"])
def test_parts_and_stores_keep_float16(tmp_path, method):
    cfg = cfg_for(tmp_path, "float16")
    data = load_dataset(cfg, seed=0)
    root = tmp_path / method
    if method == "metis":
        partition_graph(data, root, 2, fingerprint="f16")
    else:
        graph = ChunkedGraph(generate_products_chunked(cfg, 0, tmp_path / "chunked"))
        stream_partition(
            graph, root, 2, params={"method": "stream"}, fingerprint="f16s",
            dataset_fingerprint="f16",
        )  # fmt: skip
    part = load_partition(root, 0)  # verification (finite features) passes on float16
    x = part.node_feats["feats"]["x"]
    assert x.dtype == torch.float16
    ids = part.node_feats["global_id"]
    assert torch.equal(x, data.x[ids])
    store = LocalFeatureStore.from_partition_data(part)
    rows = store.get_tensor_from_global_id(group_name=None, attr_name="x", index=ids[:5])
    assert rows.dtype == torch.float16 and torch.equal(rows, data.x[ids[:5]])


def test_model_computes_float16_inputs_in_float32():
    torch.manual_seed(0)
    model = SampledGNN("sage", 8, 16, 4, num_layers=2).eval()
    x = torch.randn(30, 8).half()
    edge_index = torch.randint(0, 30, (2, 90))
    out = model(x, edge_index)
    assert out.dtype == torch.float32
    assert torch.equal(out, model(x.float(), edge_index))


def test_unknown_feature_dtype_is_one_line(compose):
    with pytest.raises(ConfigError, match=r"dataset.feature_dtype='bfloat16': expected one of"):
        compose("dataset.feature_dtype=bfloat16")
    assert compose("dataset.feature_dtype=float16").dataset.feature_dtype == "float16"


def test_ogb_features_stored_narrow(tmp_path):
    truth = write_tiny_papers100m(tmp_path)
    cfg = DatasetConfig(name="ogbn_papers100M", root=str(tmp_path), num_classes=172)
    data = load_dataset(replace(cfg, feature_dtype="float16"), seed=0)
    assert data.x.dtype == torch.float16
    assert torch.equal(data.x, torch.from_numpy(truth["feat"]).half())
