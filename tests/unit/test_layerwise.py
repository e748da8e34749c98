"""Layer-wise inference in one process (`local_view`): exact, chunk-independent, and equal to
sampled evaluation with full fan-out; plus the fallback warning and the config keys.

The multi-partition cases (real processes, RPC, gloo) are in tests/dist/test_layerwise_dist.py.
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from app.config import ConfigError, compose_config
from app.inference import evaluate_layerwise, layerwise_logits, local_view, supports_layerwise
from app.model.gnn import MLP, SampledGNN
from app.model.hetero import HeteroNodeClassifier, HeteroSAGE, NodeEmbeddings
from tests.helpers.toy import toy_graph, toy_hetero


@torch.no_grad()
def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got - ref).abs().max() / ref.abs().max()) if ref.numel() else 0.0


@pytest.fixture
def graph():
    data = toy_graph(200)
    # a self-loop, a duplicated edge and an isolated node: the awkward cases of normalisation
    extra = torch.tensor([[5, 7, 7], [5, 9, 9]])
    data.edge_index = torch.cat([data.edge_index[:, data.edge_index[1] != 199], extra], 1)
    return data


def model_of(kind: str, data, layers: int = 2) -> nn.Module:
    torch.manual_seed(3)
    if kind == "mlp":
        return MLP(data.x.size(1), 16, 3, layers, dropout=0.5)
    return SampledGNN(kind, data.x.size(1), 16, 3, layers, dropout=0.5, heads=2)


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat", "mlp"])
@pytest.mark.parametrize("layers", [1, 3])
def test_layerwise_equals_full_graph_forward(graph, kind, layers):
    model = model_of(kind, graph, layers).eval()
    ref = model(graph.x, graph.edge_index)
    view = local_view(graph)
    for chunk in (1000, 23):  # one chunk, and several smaller than the node count
        assert rel_err(layerwise_logits(model, view, chunk), ref) < 1e-4


def test_training_mode_is_restored_and_dropout_is_off(graph):
    model = model_of("sage", graph).train()
    out = layerwise_logits(model, local_view(graph), 50)
    assert model.training
    assert rel_err(out, model.eval()(graph.x, graph.edge_index)) < 1e-4


def hetero_model(data, layers: int) -> HeteroNodeClassifier:
    torch.manual_seed(4)
    widths = {"paper": data["paper"].x.size(1), "author": 5}
    gnn = HeteroSAGE(data.metadata(), widths, 16, 3, layers, dropout=0.5)
    return HeteroNodeClassifier(
        gnn, NodeEmbeddings({"author": data["author"].num_nodes}, 5), "paper"
    )


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_hetero_layerwise_equals_full_graph_forward(layers):
    data = toy_hetero()
    model = hetero_model(data, layers).eval()
    ids = {t: torch.arange(data[t].num_nodes) for t in data.node_types}
    x = model.embeddings.fill({"paper": data["paper"].x}, ids)
    ref = model.gnn(x, data.edge_index_dict)["paper"]
    for chunk in (1000, 17):
        assert rel_err(layerwise_logits(model, local_view(data), chunk), ref) < 1e-4


@pytest.mark.parametrize("kind", ["sage", "gat"])
def test_equals_sampled_evaluation_with_full_fanout(graph, kind):
    """With fan-out -1 each seed's sampled tree is its full neighbourhood: same logits.

    (GCN is left out on purpose: sampled GCN normalises by in-degrees inside the batch, which
    are truncated for the last hop's nodes, so only layer-wise GCN is the full-graph one.)
    """
    from app.loader import NeighborLoader

    model = model_of(kind, graph).eval()
    full = layerwise_logits(model, local_view(graph), 64)
    loader = NeighborLoader(graph, [-1, -1], input_nodes=torch.arange(200), batch_size=50)
    for batch in loader:
        out = model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
        seeds = batch.n_id[: batch.batch_size]
        assert rel_err(out[: batch.batch_size], full[seeds]) < 1e-4


def test_evaluate_reports_split_accuracies(graph):
    model = model_of("sage", graph).eval()
    pred = model(graph.x, graph.edge_index).argmax(-1)
    view = local_view(graph)
    for _ in range(2):  # the second reuses the view's split masks
        acc = evaluate_layerwise(model, view, 37)
        for split in ("val", "test"):
            mask = graph[f"{split}_mask"]
            assert acc[f"{split}_acc"] == pytest.approx(
                float((pred[mask] == graph.y[mask]).float().mean())
            )


def test_model_without_per_layer_forward_falls_back_with_one_warning(caplog):
    class Plain(nn.Module):
        def forward(self, x):
            return x

    with caplog.at_level(logging.WARNING, logger="app.inference.layerwise"):
        assert not supports_layerwise(Plain())
    assert len(caplog.records) == 1 and "Plain" in caplog.records[0].getMessage()
    assert supports_layerwise(model_of("gcn", toy_graph(20)))


def test_bad_chunk_size_is_one_clear_error(graph):
    with pytest.raises(ValueError, match="chunk_size=0"):
        layerwise_logits(model_of("sage", graph), local_view(graph), 0)


def test_config_keys_default_and_validate():
    cfg = compose_config([])
    assert cfg.train.eval_mode == "layerwise" and cfg.train.eval_chunk_size > 0
    with pytest.raises(ConfigError, match="train.eval_mode='exact'"):
        compose_config(["train.eval_mode=exact"])
    with pytest.raises(ConfigError, match="train.eval_chunk_size=0"):
        compose_config(["train.eval_chunk_size=0"])


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_link_scores_from_layerwise_embeddings(graph, decoder):
    from app.inference import layerwise_link_scores
    from app.model.link import Decoder, LinkPredictor

    torch.manual_seed(5)
    model = LinkPredictor(SampledGNN("sage", graph.x.size(1), 16, 16, 2), Decoder(decoder, 16))
    model.eval()
    z = model.encoder(graph.x, graph.edge_index)
    pairs = torch.randint(0, 200, (2, 50))
    del graph.y, graph.val_mask  # a link graph needs no labels
    got = layerwise_link_scores(model, local_view(graph), 64, pairs)
    assert rel_err(got, model.score(z[pairs[0]], z[pairs[1]])) < 1e-4


def _link_task(compose, hetero: bool, root):
    from app.dataset import load_dataset
    from app.dataset.mag import generate_mag, to_hetero_data
    from app.task.link import LinkTask
    from app.task.local import LocalSource

    args = (f"+experiment={'mag_link' if hetero else 'products_link'}", "dataset.num_nodes=300",
            f"dataset.root={root}", "model.decoder=mlp", "train.eval_negatives=4")  # fmt: skip
    fan = compose(*args).sampler.num_neighbors  # full fan-out: every in-edge, every hop
    full = [f"sampler.num_neighbors.{k}=[-1,-1]" for k in fan] if hetero else []
    cfg = compose(*args, *(full or ["sampler.num_neighbors=[-1,-1]"]))
    data = (
        to_hetero_data(generate_mag(cfg.dataset, cfg.seed))
        if hetero
        else load_dataset(cfg.dataset, cfg.seed)
    )
    return LinkTask(cfg, LocalSource(cfg, data))


@torch.no_grad()
def _sampled_triplets(task, split: str):
    """The sampled (full fan-out) evaluation's results, with its pairs as global ids."""
    from app.task.link import _stores, link_step

    model, results, pos, neg = task.bare.eval(), [], [], []
    for batch in task.loaders[split]:
        results.append(link_step(model, batch))
        src, dst, _ = _stores(batch, model.edge_type)
        n = src.src_index.numel()
        pos.append(torch.stack([src.n_id[src.src_index], dst.n_id[dst.dst_pos_index]]))
        neg.append(dst.n_id[dst.dst_neg_index].view(n, -1))
    return results, torch.cat(pos, 1), torch.cat(neg)


@pytest.mark.parametrize("hetero", [False, True])
def test_link_metrics_equal_sampled_full_fanout(compose, hetero, tmp_path):
    from app.inference import layerwise_embeddings
    from app.task.evaluate import layerwise_evaluator, summarize
    from app.task.link import triplet_results

    task = _link_task(compose, hetero, tmp_path / "data")
    assert task.evaluator.__wrapped__ is layerwise_evaluator  # the default for link tasks too
    sampled, pos, neg = _sampled_triplets(task, "val")
    rows = layerwise_embeddings(task.bare, task.source.inference_view(), 37)
    found = list(triplet_results(task.bare, rows, pos, neg, task.bare.edge_type, chunk_size=30))
    rows.close()

    def cat(results, key):
        return torch.cat([getattr(r, key).view(-1, r.count).t() for r in results])

    # the same scores (positive, first negative) and, but where a negative IS the positive (an
    # exact tie that float rounding may break either way), the same ranks
    assert rel_err(cat(found, "scores"), cat(sampled, "scores")) < 1e-5
    untied = (neg != pos[1].unsqueeze(1)).all(dim=1)
    assert int(untied.sum()) > 0
    rr = cat(found, "reciprocal_ranks")[untied]
    assert torch.equal(rr, cat(sampled, "reciprocal_ranks")[untied])
    assert set(summarize(found)) == set(summarize(sampled)) == {"acc", "auc", "mrr"}
    metrics = task.evaluate(("val", "test"))  # the wired evaluator: its own negatives per split
    assert metrics.pop("eval_time_s") > 0  # its wall time, logged beside epoch_time_s
    assert set(metrics) == {f"{s}_{k}" for s in ("val", "test") for k in ("acc", "auc", "mrr")}
    again = task.evaluate(("val", "test"))
    assert metrics == {k: v for k, v in again.items() if k != "eval_time_s"}  # same negatives


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
def test_kept_buffers_serve_the_next_pass_exactly(graph, kind):
    """`keep_buffers`: the view keeps a pass's buffers and the next pass takes every one of
    them back (nothing new allocated), still equal to the full-graph forward of new weights."""
    view = local_view(graph)
    taken = []
    for seed in (3, 4):
        torch.manual_seed(seed)
        model = SampledGNN(kind, graph.x.size(1), 16, 3, 2, heads=2).eval()
        got = layerwise_logits(model, view, 23, keep_buffers=True)
        assert rel_err(got, model(graph.x, graph.edge_index)) < 1e-4
        kept = view.cache["buffers/cpu"]  # where the pass computes: one process holds every row
        assert not kept.lent
        taken.append({id(b) for bufs in kept.free.values() for b in bufs})
    assert taken[0] and taken[0] == taken[1]


def test_one_process_tables_are_the_kept_buffers_where_it_computes(graph):
    """A view that holds every row reads edges unmapped (no id -> position map: positions are
    ids) and keeps its layer tables in the buffers where the pass computes (unpinned): the
    last layer's table IS a kept buffer, so nothing is copied into host tables."""
    from app.inference.layerwise import _plan, layerwise_embeddings
    from app.inference.view import NODE

    view = local_view(graph)
    model = model_of("gcn", graph).eval()  # no projection: the last layer writes a table
    rows = layerwise_embeddings(model, view, 23, keep_buffers=True)
    try:
        plan = _plan(view)
        assert plan.pos_of[NODE] is None and not plan.fetch[NODE].numel()
        assert torch.equal(plan.mine_pos[NODE], torch.arange(graph.num_nodes))
        kept = view.cache["buffers/cpu"]
        assert kept.device == torch.device("cpu") and not kept.pin
        assert view.cache["inputs/cpu"][NODE] is view.inputs[NODE]  # kept beside: no copy here
        table = rows.tables[NODE]
        assert any(table.data_ptr() == b.data_ptr() for b in kept.lent)
        ref = model(graph.x, graph.edge_index)
        assert rel_err(rows.host_rows(torch.arange(graph.num_nodes)), ref) < 1e-4
    finally:
        rows.close()


def test_an_edge_source_out_of_range_is_one_clear_error(graph):
    view = local_view(graph)
    crow, col = view.edges[("_N", "_E", "_N")]
    bad = col.clone()
    bad[3] = graph.num_nodes + 5
    view.edges[("_N", "_E", "_N")] = (crow, bad)
    with pytest.raises(IndexError, match=f"node id {graph.num_nodes + 5} out of range"):
        layerwise_logits(model_of("sage", graph), view, 50)


@pytest.mark.parametrize("kernels", ["torch", "numba"])
def test_a_jobs_view_reuses_its_samplers_csc_and_device_rows(tmp_path, monkeypatch, kernels):
    """A node job's layer-wise view reads its loaders' sampler's CSC in place (no sort, no
    copy): on the torch sampler (a GPU's path; DISTGNN_KERNELS=torch on the CPU) its tensors
    and the device features too, on the numba sampler its host arrays. They equal what
    `local_view` builds, so the logits are the same."""
    from app.config import Config, DatasetConfig, ModelConfig, validate
    from app.inference.view import EDGE
    from app.model import ops
    from app.task.local import LocalSource

    monkeypatch.setenv(ops.KERNELS_ENV, kernels)
    cfg = Config(output_dir=str(tmp_path))
    cfg.partition.num_parts = 1
    cfg.dataset = DatasetConfig(root=str(tmp_path / "data"), num_nodes=200, num_features=8)
    cfg.dataset.num_classes = 3
    cfg.model = ModelConfig(hidden_channels=16, num_layers=2)
    cfg.sampler.num_neighbors = [5, 5]
    graph = toy_graph(200)
    source = LocalSource(validate(cfg), graph)
    loader = source.node_loader("train", torch.arange(50), None)
    view, built = source.inference_view(), local_view(graph)
    (crow, col), (want_crow, want_col) = view.edges[EDGE], built.edges[EDGE]
    if kernels == "torch":
        assert col.data_ptr() == loader.sampler.tensors.row.data_ptr()
        assert view.inputs["_N"].data_ptr() == source._rows["x"].cache.data_ptr()
    else:
        assert col.data_ptr() == loader.sampler.row.ctypes.data and source._rows is None
    assert torch.equal(crow, want_crow) and torch.equal(col, want_col.long())
    model = model_of("sage", graph).eval()
    want = layerwise_logits(model, built, 37)
    assert torch.equal(layerwise_logits(model, view, 37), want)
    with pytest.raises(ValueError, match="a CSR of 199 nodes"):
        local_view(graph, edges=(crow[:-1], col))
