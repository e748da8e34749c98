"""Models: output shapes, trim-to-layer equivalence, agreement with PyG, input checks."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import GraphSAGE

from app.config import Config, ModelConfig
from app.model.gnn import Block, SampledGNN, SplitRows
from app.model.hetero import NodeEmbeddings, build_hetero_classifier
from app.model.link import Decoder, build_link_predictor
from app.model.registry import build_model
from tests.helpers.toy import ToyLoader, toy_graph, toy_hetero


@pytest.fixture(scope="module")
def batch():
    data = toy_graph(num_nodes=400, seed=1)
    loader = ToyLoader(data, [4, 3, 2], torch.arange(64), batch_size=32, seed=0)
    return next(iter(loader))


@pytest.mark.parametrize("name", ["sage", "gcn", "gat", "mlp"])
def test_shapes_and_trim_equivalence(batch, name):
    torch.manual_seed(0)
    cfg = ModelConfig(name=name, hidden_channels=16, num_layers=3, dropout=0.5, heads=4)
    model = build_model(cfg, batch.x.size(1), 5).eval()
    with torch.no_grad():
        full = model(batch.x, batch.edge_index)
        trimmed = model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    assert full.shape == (batch.x.size(0), 5)
    assert trimmed.shape == (batch.batch_size, 5)
    torch.testing.assert_close(trimmed, full[: batch.batch_size], atol=1e-5, rtol=1e-4)


def test_sage_matches_pyg_graphsage(batch):
    torch.manual_seed(0)
    ours = SampledGNN("sage", batch.x.size(1), 16, 5, 3).eval()
    ref = GraphSAGE(batch.x.size(1), 16, 3, 5).eval()
    for layer, conv in zip(ours.layers, ref.convs, strict=True):
        conv.lin_l.weight.data.copy_(layer.lin_neigh.weight)
        conv.lin_l.bias.data.copy_(layer.lin_neigh.bias)
        conv.lin_r.weight.data.copy_(layer.lin_root.weight)
    with torch.no_grad():
        expected = ref(batch.x, batch.edge_index)[: batch.batch_size]
        got = ours(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_gradients_flow_through_trimmed_forward(batch):
    model = SampledGNN("sage", batch.x.size(1), 16, 5, 3, dropout=0.5)
    out = model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    out.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_wrong_hop_count_is_a_clear_error(batch):
    model = SampledGNN("sage", batch.x.size(1), 16, 5, 2)
    with pytest.raises(ValueError, match="3 hops after the seeds for a 2-layer model"):
        model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)


def test_out_of_order_edges_are_rejected(batch):
    model = SampledGNN("sage", batch.x.size(1), 16, 5, 3)
    ei = batch.edge_index.clone()
    ei[0, 0] = batch.x.size(0) - 1  # a last-hop node feeding a seed: not hop order
    with pytest.raises(ValueError, match="not in NeighborLoader hop order"):
        model(batch.x, ei, batch.num_sampled_nodes, batch.num_sampled_edges)


@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_a_training_step_reads_back_once_on_the_gpu_path(batch, name, monkeypatch):
    """Forward and backward of a sampled batch on the torch kernels (a GPU's) read back to
    the host once (the batch's edge order and per-layer edge counts, together), counted on
    the CPU by `bench.readbacks` with the batch and weights marked as on the device; the
    shuffled batch (sorted by the model) likewise. (GAT adds one per layer: PyG's GATConv
    drops self-loops with a bool mask.)"""
    from bench.readbacks import ReadBacks

    monkeypatch.setenv("DISTGNN_KERNELS", "torch")
    torch.manual_seed(0)
    model = SampledGNN(name, batch.x.size(1), 16, 5, 3)
    perm = torch.randperm(batch.edge_index.size(1))
    for ei in (batch.edge_index.clone(), batch.edge_index[:, perm]):
        x = batch.x.clone()
        counter = ReadBacks("cpu")
        counter.on_device(x, ei, *model.parameters())
        with counter:
            out = model(x, ei, batch.num_sampled_nodes, batch.num_sampled_edges)
            out.sum().backward()
        assert counter.counts == {"tolist()": 1}, counter.counts


def test_gat_heads_must_divide_hidden():
    with pytest.raises(ValueError, match="not divisible by model.heads=3"):
        build_model(ModelConfig(name="gat", hidden_channels=16, heads=3), 8, 2)


def test_hetero_sage_trim_equivalence_and_shapes():
    from app.loader import NeighborLoader

    data = toy_hetero()
    cfg = Config(model=ModelConfig(name="sage", hidden_channels=16, num_layers=2, dropout=0.0))
    torch.manual_seed(0)
    in_channels = {"paper": data["paper"].x.size(1), "author": 16}
    embeddings = NodeEmbeddings({"author": data["author"].num_nodes}, 16)
    model = build_hetero_classifier(
        cfg.model, data.metadata(), in_channels, data.num_classes, "paper", embeddings
    ).eval()
    assert model.target == "paper"
    assert set(model.embeddings.tables) == {"author"}
    ids = data["paper"].train_mask.nonzero().view(-1)
    loader = NeighborLoader(data, [3, 2], input_nodes=("paper", ids), batch_size=16)
    batch = next(iter(loader))
    with torch.no_grad():
        trimmed = model(batch)
        x = {"paper": batch["paper"].x}
        x = model.embeddings.fill(x, {t: batch[t].n_id for t in batch.node_types})
        full = model.gnn(x, batch.edge_index_dict)["paper"][:16]
    assert trimmed.shape == (16, 3)
    torch.testing.assert_close(trimmed, full, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_link_predictor_scores_pairs(batch, decoder):
    cfg = Config(model=ModelConfig(name="sage", hidden_channels=16, num_layers=3))
    cfg.model.decoder = decoder  # not (yet) a config field: read with getattr default "dot"
    model = build_link_predictor(cfg, batch.x.size(1))
    z_src, z_dst = model.embed(batch)
    assert z_src.shape == (batch.batch_size, 16)
    pairs = torch.tensor([[0, 1, 2], [3, 4, 5]])
    assert model.score(z_src[pairs[0]], z_dst[pairs[1]]).shape == (3,)


def test_unknown_decoder_is_rejected():
    with pytest.raises(ValueError, match="link decoder 'cos'"):
        Decoder("cos", 8)


@pytest.mark.parametrize("mode", ["binary", "triplet"])
def test_hetero_link_predictor_trains_on_one_edge_type(mode):
    from app.loader import LinkNeighborLoader
    from app.model.hetero import HeteroSAGE
    from app.model.link import HeteroLinkPredictor
    from app.task.link import link_step

    data = toy_hetero()
    et = ("author", "writes", "paper")
    torch.manual_seed(0)
    gnn = HeteroSAGE(data.metadata(), {"paper": 6, "author": 8}, 16, 16, 2)
    model = HeteroLinkPredictor(gnn, NodeEmbeddings({"author": 60}, 8), et, Decoder("dot", 16))
    loader = LinkNeighborLoader(
        data, [3, 2], edge_label_index=et, neg_sampling=mode, batch_size=32, seed=1
    )
    res = link_step(model, next(iter(loader)))
    res.loss.backward()
    assert torch.isfinite(res.loss)
    if mode == "binary":  # 32 positives + 32 negatives, each scored and labelled
        assert res.count == 64 and res.scores.shape == res.labels.shape == (64,)
    else:
        assert res.count == 32 and res.reciprocal_ranks.shape == (32,)
        assert (res.reciprocal_ranks <= 1).all()
    assert model.embeddings.tables["author"].weight.grad is not None


def test_csr_matmul_gradient_matches_dense(batch):
    from app.model.gnn import SampledGraph, aggregate

    graph = SampledGraph(batch.edge_index, batch.x.size(0), 3, batch.num_sampled_nodes)
    adj = graph.adjacency(0, graph.mean_values())
    dense = torch.zeros(adj.n_rows, adj.n_cols)
    dense.index_put_((adj.row, adj.col), adj.val, accumulate=True)
    h = torch.randn(adj.n_cols, 7, requires_grad=True)
    weight = torch.randn(adj.n_rows, 7)
    (aggregate(adj, h) * weight).sum().backward()
    ours = h.grad.clone()
    h.grad = None
    (dense @ h * weight).sum().backward()
    torch.testing.assert_close(ours, h.grad, atol=1e-5, rtol=1e-4)


def test_edge_order_does_not_matter(batch):
    torch.manual_seed(0)
    model = SampledGNN("sage", batch.x.size(1), 16, 5, 3).eval()
    perm = torch.randperm(batch.edge_index.size(1))
    with torch.no_grad():
        sorted_out = model(batch.x, batch.edge_index, batch.num_sampled_nodes)
        shuffled = model(batch.x, batch.edge_index[:, perm], batch.num_sampled_nodes)
    torch.testing.assert_close(sorted_out, shuffled, atol=1e-5, rtol=1e-4)


def test_hetero_sage_matches_pyg_heteroconv():
    from torch_geometric.nn import HeteroConv, SAGEConv

    from app.model.hetero import HeteroSAGE, edge_key

    data = toy_hetero()
    x = {"paper": data["paper"].x, "author": torch.randn(data["author"].num_nodes, 4)}
    torch.manual_seed(0)
    ours = HeteroSAGE(data.metadata(), {"paper": 6, "author": 4}, 8, 3, 1).eval()
    ref = HeteroConv(
        {et: SAGEConv((x[et[0]].size(1), x[et[-1]].size(1)), 3) for et in data.edge_types},
        aggr="sum",
    )
    for et in data.edge_types:
        mine, theirs = ours.layers[0][edge_key(et)], ref.convs[et]
        theirs.lin_l.weight.data.copy_(mine.lin_neigh.weight)
        theirs.lin_l.bias.data.copy_(mine.lin_neigh.bias)
        theirs.lin_r.weight.data.copy_(mine.lin_root.weight)
    with torch.no_grad():
        got, expected = ours(x, data.edge_index_dict), ref(x, data.edge_index_dict)
    for t in expected:
        torch.testing.assert_close(got[t], expected[t], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("index", [torch.int64, torch.int32])
def test_block_mean_reads_split_rows_in_place(index):
    """The layer-wise mean kernel (prefetching, two sources) equals a plain mean, rows with no
    in-edges give 0, and split rows' targets must lie in the head."""
    gen = torch.Generator().manual_seed(5)
    counts = torch.tensor([3, 0, 5, 1, 0, 40])  # more edges than the prefetch distance
    crow = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)]).to(index)
    h = torch.randn(50, 7, generator=gen)
    col = torch.randint(0, 50, (int(counts.sum()),), generator=gen).to(index)
    block = Block(crow, col, 50, dst=torch.arange(6))
    want = torch.stack([h[col[crow[i] : crow[i + 1]].long()].mean(0) if counts[i] else
                        torch.zeros(7) for i in range(6)])  # fmt: skip
    split = SplitRows(h[:20], h[20:])
    assert torch.allclose(block.mean(h), want, atol=1e-6)
    assert torch.allclose(block.mean(split, torch.full((6, 7), 9.0)), want, atol=1e-6)
    assert torch.equal(block.targets(split), h[:6])
    with pytest.raises(ValueError, match="past the split's head"):
        Block(crow, col, 50, dst=torch.arange(18, 24)).targets(split)


def test_a_block_on_the_device_reads_nothing_back(monkeypatch):
    """Layer-wise inference on a GPU builds a block per chunk and layer: its mean, its
    targets' rows and its edges' rows read nothing back from the device (counted on the CPU,
    the torch path's tensors marked as there), the range test reading the host copy of `dst`."""
    from bench.readbacks import ReadBacks

    monkeypatch.setenv("DISTGNN_KERNELS", "torch")
    gen = torch.Generator().manual_seed(5)
    counts = torch.tensor([3, 0, 5, 1, 0, 40])
    crow = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    col = torch.randint(0, 50, (int(counts.sum()),), generator=gen)
    h, lead = torch.randn(50, 7, generator=gen), torch.arange(10, 16)
    want = Block(crow, col, 50, dst=lead)
    dst = lead.clone()
    counter = ReadBacks("cpu")
    counter.on_device(crow, col, dst, h)
    with counter:
        block = Block(crow, col, 50, dst=dst, dst_host=lead)
        mean, targets, row = block.mean(h), block.targets(h), block.row
    assert counter.counts == {}, counter.counts
    assert torch.equal(mean, want.mean(h)) and torch.equal(targets, h[10:16])
    assert torch.equal(row, torch.repeat_interleave(torch.arange(6), counts))
