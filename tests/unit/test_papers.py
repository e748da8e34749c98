"""`synthetic_papers` (ogbn-papers100M's shape), its experiment, and the real papers100M loader."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from app.config import DatasetConfig
from app.dataset import OgbDataMissingError, load_dataset
from app.dataset.chunked import ChunkedGraph
from app.dataset.synthetic_stream import generate_products_chunked
from tests.helpers.papers import write_tiny_papers100m

torch.set_num_threads(1)

N = 20_000


@pytest.fixture(scope="module")
def papers_cfg(tmp_path_factory) -> DatasetConfig:
    """The experiment's dataset config (conf/dataset/synthetic_papers.yaml) at 20k nodes."""
    from app.config import compose_config

    root = tmp_path_factory.mktemp("papers")
    cfg = compose_config(
        ["+experiment=papers_homo", f"dataset.num_nodes={N}", f"dataset.root={root}"]
    )
    return cfg.dataset


@pytest.fixture(scope="module")
def papers(papers_cfg) -> Data:
    return load_dataset(papers_cfg, seed=0)


def test_experiment_composes_to_papers_shape(compose):
    cfg = compose("+experiment=papers_homo")
    d = cfg.dataset
    assert (d.name, d.num_nodes, d.num_features, d.num_classes) == (
        "synthetic_papers", 11_100_000, 128, 172
    )  # fmt: skip
    assert d.avg_degree == 29.0  # 14.5 citations per paper, both directions
    assert cfg.sampler.num_neighbors == [15, 10, 5] and cfg.model.num_layers == 3
    assert cfg.model.name == "sage" and cfg.partition.method == "stream"
    assert cfg.cluster.num_nodes == 4 == cfg.partition.num_parts
    assert cfg.train.eval_mode == "sampled"


def test_degree_symmetry_and_power_law(papers):
    n, ei = papers.num_nodes, papers.edge_index
    assert n == N and ei.dtype == torch.int64
    assert ei.size(1) == N * 29  # exactly 14.5 undirected pairs per node, made symmetric
    keys = ei[0] * n + ei[1]
    assert keys.unique().numel() == keys.numel(), "duplicate edges"
    assert torch.equal(keys.sort().values, (ei[1] * n + ei[0]).sort().values), "not symmetric"
    assert bool((ei[0] != ei[1]).all()), "self loops"
    deg = torch.bincount(ei[0], minlength=n).float()
    assert abs(deg.mean().item() / 2 - 14.5) < 1e-6  # average out-degree of the citations
    assert deg.max() > 6 * deg.mean(), "no hubs: degrees not heavy-tailed"


def test_split_sizes_dtypes_and_label_range(papers):
    assert papers.x.dtype == torch.float32 and papers.x.shape == (N, 128)
    assert papers.y.dtype == torch.int64 and papers.num_classes == 172
    assert int(papers.y.min()) >= 0 and int(papers.y.max()) < 172
    sizes = [int(m.sum()) for m in (papers.train_mask, papers.val_mask, papers.test_mask)]
    assert sizes == [int(N * 0.0109), int(N * 0.00113), int(N * 0.00193)] == [218, 22, 38]
    labelled = papers.train_mask.int() + papers.val_mask.int() + papers.test_mask.int()
    assert int(labelled.max()) == 1, "masks overlap"
    assert int(labelled.sum()) == sum(sizes)  # the rest, as in papers100M, in no mask


def test_communities_make_neighbours_informative(papers):
    """Labels follow communities and features: averaging a node's neighbours' features
    classifies it far better than its own features alone (what a GNN learns from)."""
    src, dst = papers.edge_index
    homophily = (papers.y[src] == papers.y[dst]).float().mean().item()
    assert homophily > 0.5, homophily
    x, y = papers.x, papers.y
    means = torch.zeros(172, 128).index_add_(0, y, x) / torch.bincount(y, minlength=172)[:, None]
    agg = torch.zeros_like(x).index_add_(0, dst, x[src])
    agg /= torch.bincount(dst, minlength=N).clamp(min=1)[:, None].float()

    def acc(feat: torch.Tensor) -> float:
        return (torch.cdist(feat, means).argmin(1) == y).float().mean().item()

    own, neighbours = acc(x), acc((x + agg) / 2)
    assert neighbours > own + 0.15, (own, neighbours)


def test_deterministic_by_seed(papers_cfg, papers, tmp_path):
    again = load_dataset(replace(papers_cfg, root=str(tmp_path)), seed=0)  # regenerated
    assert torch.equal(again.edge_index, papers.edge_index) and torch.equal(again.x, papers.x)
    assert torch.equal(again.y, papers.y) and torch.equal(again.train_mask, papers.train_mask)
    other = load_dataset(replace(papers_cfg, root=str(tmp_path)), seed=1)
    assert not torch.equal(other.edge_index, papers.edge_index)


def test_streamed_chunks_equal_the_in_memory_graph(papers_cfg, papers, tmp_path):
    """`partition=stream` generates papers straight to chunks: the same graph."""
    graph = ChunkedGraph(generate_products_chunked(papers_cfg, 0, tmp_path / "chunked"))
    assert graph.symmetric and graph.sorted_by_src
    src = np.concatenate([s for _, s, _ in graph.edge_chunks()])
    dst = np.concatenate([d for _, _, d in graph.edge_chunks()])
    assert np.array_equal(np.stack([src, dst]), papers.edge_index.numpy())
    for name in ("x", "y", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(graph.node_array(name), getattr(papers, name).numpy()), name


# ----------------------------------------------------------------------------- real papers100M


def test_ogbn_papers100m_from_ogb_layout(tmp_path):
    truth = write_tiny_papers100m(tmp_path)
    cfg = DatasetConfig(name="ogbn_papers100M", root=str(tmp_path), num_features=128)
    cfg = replace(cfg, num_classes=172)
    for _ in range(2):  # 1st: read from raw/; 2nd: our converted cache
        data = load_dataset(cfg, seed=0)
        assert isinstance(data, Data) and data.num_nodes == 40 and data.num_classes == 172
        assert torch.equal(data.x, torch.from_numpy(truth["feat"]))
        citations = {tuple(e) for e in truth["edges"].T.tolist()}
        got = set(map(tuple, data.edge_index.t().tolist()))
        assert got == citations | {(v, u) for u, v in citations}  # made undirected
        labelled = ~np.isnan(truth["label"])
        assert torch.equal(data.y[labelled], torch.from_numpy(truth["label"][labelled]).long())
        assert int(data.y.min()) >= 0 and int(data.y.max()) < 172
        for key, mask in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
            got_ids = np.sort(getattr(data, mask).nonzero().view(-1).numpy())
            assert np.array_equal(got_ids, np.sort(truth["split"][key])), mask
    assert not (tmp_path / "ogbn_papers100M/processed").exists()  # no second copy pickled


def test_ogbn_papers100m_missing_file_is_one_line(tmp_path):
    write_tiny_papers100m(tmp_path)
    (tmp_path / "ogbn_papers100M/raw/node-label.npz").unlink()
    with pytest.raises(OgbDataMissingError, match=r"raw/node-label\.npz.*papers100M-bin\.zip"):
        load_dataset(DatasetConfig(name="ogbn_papers100M", root=str(tmp_path)), seed=0)
