"""The chunked on-disk graph: streamed generation equals the in-memory generator, conversion
round trip, fixed-size chunks, and incomplete folders that never load."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from app.config import DatasetConfig
from app.dataset import synthetic_stream
from app.dataset.chunked import ChunkedGraph, ChunkedGraphError, ChunkedWriter, write_data
from app.dataset.synthetic import generate_products


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
