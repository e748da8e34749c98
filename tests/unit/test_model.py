"""Models: output shapes, trim-to-layer equivalence, agreement with PyG, input checks.

Also holds the toy graph and the toy NeighborLoader-layout loader that the training tests
import: a tiny homophilous graph, sampled hop by hop with a few lines of numpy, so the model
and loop tests do not depend on the real sampler.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.nn import GraphSAGE

from app.config import Config, ModelConfig
from app.model.gnn import Block, SampledGNN, SplitRows
from app.model.hetero import NodeEmbeddings, build_hetero_classifier
from app.model.link import Decoder, build_link_predictor
from app.model.registry import build_model


def toy_graph(num_nodes: int = 300, num_classes: int = 3, seed: int = 0) -> Data:
    """Classes are communities (95% of edges inside); features are weakly informative."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, num_classes, num_nodes)
    dst = np.repeat(np.arange(num_nodes), 6)
    same = rng.random(len(dst)) < 0.95
    by_class = [np.flatnonzero(y == c) for c in range(num_classes)]
    src = np.array(
        [
            rng.choice(by_class[y[d]]) if s else rng.integers(num_nodes)
            for d, s in zip(dst, same, strict=True)
        ]
    )
    x = np.eye(num_classes)[y] * 0.6 + rng.normal(size=(num_nodes, num_classes))
    x = np.concatenate([x, rng.normal(size=(num_nodes, 5))], axis=1)
    split = rng.permutation(num_nodes)
    masks = [np.zeros(num_nodes, bool) for _ in range(3)]
    masks[0][split[: num_nodes // 2]] = True
    masks[1][split[num_nodes // 2 : 3 * num_nodes // 4]] = True
    masks[2][split[3 * num_nodes // 4 :]] = True
    return Data(
        x=torch.tensor(x, dtype=torch.float32),
        y=torch.from_numpy(y),
        edge_index=torch.from_numpy(np.stack([src, dst])),
        train_mask=torch.from_numpy(masks[0]),
        val_mask=torch.from_numpy(masks[1]),
        test_mask=torch.from_numpy(masks[2]),
        num_classes=num_classes,
    )


def sample(indptr, indices, seeds, fanouts, rng):
    """Directional neighbour sampling without replacement in PyG's hop-ordered layout."""
    local = {int(s): i for i, s in enumerate(seeds)}
    nodes, rows, cols = list(seeds), [], []
    counts, edge_counts, frontier = [len(seeds)], [], list(seeds)
    for k in fanouts:
        new, hop_edges = [], 0
        for v in frontier:
            nbrs = indices[indptr[v] : indptr[v + 1]]
            if len(nbrs) > k:
                nbrs = rng.choice(nbrs, k, replace=False)
            for u in nbrs:
                if int(u) not in local:
                    local[int(u)] = len(nodes)
                    nodes.append(int(u))
                    new.append(int(u))
                rows.append(local[int(u)])
                cols.append(local[int(v)])
                hop_edges += 1
        counts.append(len(new))
        edge_counts.append(hop_edges)
        frontier = new
    edge_index = torch.tensor([rows, cols], dtype=torch.int64).view(2, -1)
    return torch.tensor(nodes), edge_index, counts, edge_counts


class ToyLoader:
    """Batches of `batch_size` seeds from `input_nodes`; `skip` drops the last batches."""

    def __init__(self, data, fanouts, input_nodes, batch_size, shuffle=False, seed=0):
        order = torch.argsort(data.edge_index[1], stable=True)
        self.indices = data.edge_index[0][order].numpy()
        counts = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
        self.indptr = np.concatenate([[0], np.cumsum(counts.numpy())])
        self.data, self.fanouts, self.batch_size = data, fanouts, batch_size
        self.input_nodes = input_nodes
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return -(-len(self.input_nodes) // self.batch_size)

    def __iter__(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        seeds = self.input_nodes.numpy()
        if self.shuffle:
            seeds = rng.permutation(seeds)
        for start in range(0, len(seeds), self.batch_size):
            chunk = seeds[start : start + self.batch_size]
            n_id, ei, counts, ecounts = sample(self.indptr, self.indices, chunk, self.fanouts, rng)
            yield Data(
                x=self.data.x[n_id],
                y=self.data.y[n_id],
                edge_index=ei,
                n_id=n_id,
                batch_size=len(chunk),
                num_sampled_nodes=counts,
                num_sampled_edges=ecounts,
            )


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


def test_gat_heads_must_divide_hidden():
    with pytest.raises(ValueError, match="not divisible by model.heads=3"):
        build_model(ModelConfig(name="gat", hidden_channels=16, heads=3), 8, 2)


def toy_hetero(num_papers: int = 120, num_authors: int = 60, seed: int = 0) -> HeteroData:
    """Papers (features, labels, masks) cite papers; featureless authors write papers."""
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["paper"].x = torch.randn(num_papers, 6, generator=g)
    data["paper"].y = torch.randint(0, 3, (num_papers,), generator=g)
    mask = torch.zeros(num_papers, dtype=torch.bool)
    data["paper"].train_mask = mask.clone().index_fill_(0, torch.arange(0, num_papers, 2), True)
    data["paper"].val_mask = mask.clone().index_fill_(0, torch.arange(1, num_papers, 4), True)
    data["paper"].test_mask = mask.clone().index_fill_(0, torch.arange(3, num_papers, 4), True)
    data["author"].num_nodes = num_authors
    cites = torch.randint(0, num_papers, (2, 4 * num_papers), generator=g)
    writes = torch.stack(
        [
            torch.randint(0, num_authors, (3 * num_papers,), generator=g),
            torch.randint(0, num_papers, (3 * num_papers,), generator=g),
        ]
    )
    data["paper", "cites", "paper"].edge_index = cites
    data["author", "writes", "paper"].edge_index = writes
    data["paper", "rev_writes", "author"].edge_index = writes.flip(0)
    data.num_classes = 3
    return data


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
