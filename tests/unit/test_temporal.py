"""Temporal sampling end to end on one process: the partition's node times, the experiment
config, and `python -m app +experiment=smoke dataset.temporal=true sampler.time_attr=time`
training and logging to MLflow as a real process."""

from __future__ import annotations

import json

import pytest
import torch
from torch_geometric.data import Data, HeteroData

from app.partition import load_partition
from app.partition.writer import partition_graph
from tests.helpers.jobs import run_app


def _temporal_data(n: int = 200) -> Data:
    gen = torch.Generator().manual_seed(0)
    return Data(
        x=torch.randn(n, 4, generator=gen),
        y=torch.randint(0, 3, (n,), generator=gen),
        edge_index=torch.randint(0, n, (2, 6 * n), generator=gen),
        time=torch.randint(0, 50, (n,), generator=gen),
        num_nodes=n,
    )


def test_partition_holds_every_nodes_time(tmp_path):
    """node_time.pt covers owned AND halo nodes, is checksummed, and follows relabelling."""
    data = _temporal_data()
    for relabel in (False, True):
        root = tmp_path / f"p{int(relabel)}"
        partition_graph(data, root, 2, method="random", relabel=relabel)
        meta = json.loads((root / "META.json").read_text())
        assert "node_time.pt" in meta["checksums"]
        part = load_partition(root, 0)
        orig = part.orig_id if relabel else torch.arange(data.num_nodes)
        assert torch.equal(part.node_time, data.time[orig])
        assert part.graph["halo"].numel() > 0  # halo sources have times too: the point
        assert torch.equal(part.node_time, part.node_feats["time"])  # PyG's: every node's time


def test_hetero_partition_times_per_type(tmp_path):
    data = HeteroData()
    data["paper"].num_nodes, data["author"].num_nodes = 30, 20
    data["paper"].time = torch.arange(30)
    data["author", "writes", "paper"].edge_index = torch.stack(
        [torch.arange(60) % 20, torch.arange(60) % 30]
    )
    partition_graph(data, tmp_path / "p", 2, method="random")
    part = load_partition(tmp_path / "p", 1)
    assert set(part.node_time) == {"paper"} and torch.equal(
        part.node_time["paper"], data["paper"].time
    )


def test_non_temporal_partition_has_no_time_file(tmp_path):
    data = _temporal_data()
    del data.time
    partition_graph(data, tmp_path / "p", 2, method="random")
    assert not (tmp_path / "p" / "node_time.pt").exists()
    assert load_partition(tmp_path / "p", 0).node_time is None


def test_products_temporal_experiment_composes(compose):
    cfg = compose("+experiment=products_temporal")
    assert cfg.dataset.temporal and cfg.sampler.time_attr == "time"
    assert cfg.sampler.temporal_strategy == "uniform" and cfg.cluster.num_nodes == 2


@pytest.mark.dist
def test_single_process_temporal_training_logs(tmp_path):
    proc = run_app(
        "+experiment=smoke",
        "dataset.temporal=true",
        "sampler.time_attr=time",
        "sampler.temporal_strategy=last",
        f"output_dir={tmp_path}",
        f"dataset.root={tmp_path / 'data'}",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("distgnn")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["sampler.time_attr"] == "time"
    assert run.data.params["dataset.temporal"] == "True"
    for name in ("loss", "train_acc", "val_acc", "test_acc", "system/sampled_edges_per_s"):
        history = client.get_metric_history(run.info.run_id, name)
        assert [m.step for m in history] == [0, 1], name
    assert all(
        torch.isfinite(torch.tensor(m.value))
        for m in client.get_metric_history(run.info.run_id, "loss")
    )


def test_hetero_partition_sampler_equals_local_temporal_sampler(tmp_path):
    """One partition, in process: the distributed sampler's temporal path (times per node type,
    untimed source types unfiltered) equals the local sampler's, id for id, both strategies."""
    from torch_geometric.sampler import NodeSamplerInput

    from app.distributed.sampler import DistNeighborSampler, SamplerOptions
    from app.distributed.server import load_stores
    from app.sampler.neighbor import NeighborSampler

    gen = torch.Generator().manual_seed(0)
    data = HeteroData()
    data["paper"].num_nodes, data["author"].num_nodes = 300, 200
    data["paper"].time = torch.randint(0, 50, (300,), generator=gen)
    writes = torch.stack(
        [torch.randint(200, (900,), generator=gen), torch.randint(300, (900,), generator=gen)]
    )
    data["author", "writes", "paper"].edge_index = writes
    data["paper", "rev_writes", "author"].edge_index = writes.flip(0)
    data["paper", "cites", "paper"].edge_index = torch.randint(300, (2, 1200), generator=gen)
    partition_graph(data, tmp_path / "p", 1, method="random")
    stores = load_stores(str(tmp_path / "p"), 0)
    seeds = torch.arange(40)
    seed_time = data["paper"].time[seeds]
    for strategy in ("uniform", "last"):
        options = SamplerOptions([3, 2], time_attr="time", temporal_strategy=strategy)
        dist = DistNeighborSampler(stores, options=options)
        local = NeighborSampler(data, [3, 2], time_attr="time", temporal_strategy=strategy)
        a = dist.sample_from_nodes(seeds, "paper", 9, seed_time)
        b = local.sample_from_nodes(NodeSamplerInput(None, seeds, seed_time, "paper"), seed=9)
        for t in data.node_types:
            assert torch.equal(a.node[t], b.node[t]) and torch.equal(a.batch[t], b.batch[t])
        for et in data.edge_types:
            assert torch.equal(a.row[et], b.row[et]) and torch.equal(a.col[et], b.col[et])
            assert torch.equal(a.edge[et], b.edge[et]), et
        cites = ("paper", "cites", "paper")
        src = a.node["paper"][a.row[cites]]
        tree = a.batch["paper"][a.row[cites]]
        assert a.row[cites].numel() and bool((data["paper"].time[src] <= seed_time[tree]).all())
