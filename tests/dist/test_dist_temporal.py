"""Distributed temporal sampling over real processes and real RPC on 127.0.0.1.

A small graph with node times is partitioned by the project's writer (METIS, 2 parts: the
global `node_time.pt` and time-sorted columns included). Each trainer samples its seeds with
`DistNeighborLoader(time_attr='time')`, through one sampler process per partition, and checks
every batch against the single-machine `NeighborSampler(time_attr='time')` with the same seed:
equal id for id (nodes, edges, edge ids, tree ids, per-hop counts), for both strategies and for
default (the seeds' own) and explicit seed times; and on global ids against the original
graph: every edge exists, no sampled neighbour is later than its seed's time, features are the
originals. The same file is the child-process entry (`python tests/dist/test_dist_temporal.py
SPEC ROLE NODE WORKER`): it adds its check to the harness of `tests/helpers/dist_procs.py`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402
import torch  # noqa: E402
from torch_geometric.data import Data  # noqa: E402

from tests.helpers import dist_procs  # noqa: E402
from tests.helpers.dist_graphs import node_features, random_graph  # noqa: E402
from tests.helpers.ports import free_port  # noqa: E402

pytestmark = pytest.mark.dist
TIMEOUT_S = 150  # hard bound on the whole job (the machine may be heavily shared)
FANOUT = [3, 2]
MAX_TIME = 100


@dataclass
class TemporalJob(dist_procs.Job):
    """`dist_procs.Job` whose processes run this file (so they know `check_temporal`)."""

    script: str = __file__


def temporal_graph(n: int = 500) -> Data:
    gen = torch.Generator().manual_seed(4)
    return Data(
        x=node_features(n),
        y=torch.arange(n) % 7,
        edge_index=random_graph(n, 6, seed=2),
        time=torch.randint(0, MAX_TIME, (n,), generator=gen),
        num_nodes=n,
    )


def test_temporal_equals_local_sampling(tmp_path):
    from app.partition.writer import partition_graph

    data = temporal_graph()
    partition_graph(data, tmp_path / "part", 2, method="metis")
    torch.save({k: data[k] for k in ("edge_index", "x", "y", "time")}, tmp_path / "graph.pt")
    spec = dist_procs.write_spec(
        tmp_path / "spec.json", root=str(tmp_path / "part"), graph=str(tmp_path / "graph.pt"),
        num_parts=2, num_workers=1, port=free_port(), dir=str(tmp_path), timeout=20.0,
        batch_size=64, check="check_temporal",
    )  # fmt: skip
    with TemporalJob(spec, 2, 1) as job:
        codes = job.wait(TIMEOUT_S)
        assert all(c == 0 for c in codes.values()), job.report()
        for p in range(2):
            assert "CHECKS OK" in job.tail(f"trainer{p}-0"), job.report()


def test_partition_without_times_refuses_temporal_sampling(tmp_path):
    from app.distributed.sampler import DistNeighborSampler, SamplerOptions
    from app.distributed.server import load_stores
    from app.partition.writer import partition_graph

    data = temporal_graph(200)
    del data.time
    partition_graph(data, tmp_path / "part", 2, method="random")
    assert not (tmp_path / "part" / "node_time.pt").exists()
    stores = load_stores(str(tmp_path / "part"), 0)
    with pytest.raises(ValueError, match="holds no node times.*dataset.temporal=true"):
        DistNeighborSampler(stores, options=SamplerOptions(FANOUT, time_attr="time"))
    with pytest.raises(ValueError, match="time_attr='stamp'.*sampler.time_attr=time"):
        DistNeighborSampler(stores, options=SamplerOptions(FANOUT, time_attr="stamp"))
    assert (
        DistNeighborSampler(stores, options=SamplerOptions(FANOUT)).temporal is False
    )  # non-temporal still works


# -- inside the trainer processes -----------------------------------------------------------------


def _check_batch(b, out, seed_time: torch.Tensor, g: dict) -> None:
    """Distributed batch == local sample (id for id); on global ids, nothing from the future."""
    assert torch.equal(b.n_id, out.node), "sampled nodes differ from local temporal sampling"
    assert torch.equal(b.edge_index[0], out.row) and torch.equal(b.edge_index[1], out.col)
    assert torch.equal(b.e_id, out.edge), "edge ids differ"
    assert torch.equal(b.batch, out.batch), "disjoint tree ids differ"
    assert b.num_sampled_nodes == out.num_sampled_nodes
    assert b.num_sampled_edges == out.num_sampled_edges
    assert torch.equal(b.seed_time, seed_time), "batch seed_time is not the input time"
    ei, t = g["edge_index"], g["time"]
    src, dst = b.n_id[b.edge_index[0]], b.n_id[b.edge_index[1]]
    assert torch.equal(ei[0, b.e_id], src) and torch.equal(ei[1, b.e_id], dst), "edge not in graph"
    tree_time = seed_time[b.batch[b.edge_index[0]]]
    assert bool((t[src] <= tree_time).all()), "a sampled neighbour is later than its seed"
    assert torch.equal(b.x, g["x"][b.n_id]) and torch.equal(b.time, t[b.n_id])


def check_temporal(rt, spec: dict) -> int:
    """Both strategies, default and explicit seed times, 2 shuffled epochs each."""
    from torch_geometric.sampler import NodeSamplerInput

    from app.distributed import DistContext, DistNeighborLoader, shutdown
    from app.sampler.kernel import derive_seed
    from app.sampler.neighbor import NeighborSampler

    g = torch.load(spec["graph"])
    data = Data(edge_index=g["edge_index"], time=g["time"], num_nodes=g["x"].size(0))
    ctx = DistContext.from_runtime(rt)
    kw = dist_procs._loader_kwargs(rt, spec, ctx)
    failed, batches, edges = True, 0, 0
    try:
        for strategy, explicit in (("uniform", False), ("last", False), ("uniform", True)):
            local = NeighborSampler(data, FANOUT, time_attr="time", temporal_strategy=strategy)
            loader = DistNeighborLoader(
                spec["root"], FANOUT, shuffle=True, time_attr="time", temporal_strategy=strategy,
                **kw,
            )  # fmt: skip
            times = g["time"][loader.inputs.ids]
            if explicit:  # earlier than the seeds' own times: stricter filtering
                times = times // 2
                loader = DistNeighborLoader(
                    spec["root"], FANOUT, shuffle=True, time_attr="time", input_time=times,
                    temporal_strategy=strategy, **kw,
                )  # fmt: skip
            for epoch in range(2):
                for i, b in enumerate(loader):
                    seeds = b.n_id[: b.batch_size]
                    seed_time = times[b.input_id]
                    ref = NodeSamplerInput(b.input_id, seeds, seed_time)
                    out = local.sample_from_nodes(ref, seed=derive_seed(5, epoch, i))
                    _check_batch(b, out, seed_time, g)
                    batches, edges = batches + 1, edges + b.e_id.numel()
            loader.close()
        assert edges > 0, "no edges sampled: the check would prove nothing"
        failed = False
    finally:
        shutdown(ctx, 60.0, failed)
    print(f"CHECKS OK {batches} batches {edges} edges", flush=True)
    return 0


if __name__ == "__main__":
    dist_procs.CHECKS["check_temporal"] = check_temporal
    sys.exit(dist_procs.main())
