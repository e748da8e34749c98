"""Heterogeneous link prediction (paper → field_of_study): no leakage, and it learns end to end."""

from __future__ import annotations

import pytest
import torch

from app.dataset.link_split import HETERO_LINK_TYPE
from app.dataset.mag import generate_mag, to_hetero_data
from app.model.link import HeteroLinkPredictor
from app.task.link import LinkTask
from app.task.local import LocalSource
from tests.helpers.jobs import run_app

REV = ("field_of_study", "rev_has_topic", "paper")


def _pairs(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    return set(map(tuple, edge_index.t().tolist()))


def test_held_out_links_and_reverses_never_pass_messages(compose):
    cfg = compose("+experiment=mag_link", "dataset.num_nodes=400")
    data = to_hetero_data(generate_mag(cfg.dataset, cfg.seed))
    before = data[HETERO_LINK_TYPE].edge_index.clone()
    task = LinkTask(cfg, LocalSource(cfg, data))
    model, loaders = task.bare, {s: ld.loader for s, ld in task.loaders.items()}
    graph = loaders["train"].data
    assert isinstance(model, HeteroLinkPredictor) and model.edge_type == HETERO_LINK_TYPE
    assert task.tables is not None and task.tables.optimizer is not None  # SparseAdam on rows
    val, test = (_pairs(loaders[s].edge_label_index) for s in ("val", "test"))
    held = val | test
    assert val and test and not val & test and held <= _pairs(before)
    assert loaders["val"].data is graph and loaders["test"].data is graph
    mp, mp_rev = _pairs(graph[HETERO_LINK_TYPE].edge_index), _pairs(graph[REV].edge_index)
    assert not held & mp
    assert not {(f, p) for p, f in held} & mp_rev
    assert mp == _pairs(before) - held and mp_rev == {(f, p) for p, f in mp}
    assert _pairs(loaders["train"].edge_label_index) == mp  # supervision = train links only
    assert torch.equal(data[HETERO_LINK_TYPE].edge_index, before)  # the input is untouched
    assert (
        graph[("paper", "cites", "paper")].edge_index is data["paper", "cites", "paper"].edge_index
    )
    batch = next(iter(loaders["val"]))  # held-out links: triplets with eval_negatives each
    negatives = batch["field_of_study"].dst_neg_index
    assert negatives.numel() == cfg.train.eval_negatives * batch["paper"].src_index.numel()
    res = task.step(task.bare, batch)  # AUC over the first negative, MRR over all of them
    assert res.scores.numel() == 2 * res.count and res.reciprocal_ranks.numel() == res.count


@pytest.mark.dist
@pytest.mark.long  # test_parity's hetero link job covers the path in make test
def test_mag_link_experiment_learns_and_logs_auc(tmp_path):
    from mlflow.tracking import MlflowClient

    proc = run_app(
        "+experiment=mag_link", f"output_dir={tmp_path}", f"dataset.root={tmp_path / 'data'}",
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("distgnn")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["train.objective"] == "link"
    assert run.data.metrics["test_auc"] > 0.65 and run.data.metrics["val_auc"] > 0.65
    assert 0 < run.data.metrics["val_mrr"] <= 1 and 0 < run.data.metrics["test_mrr"] <= 1
