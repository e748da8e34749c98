"""Distributed temporal link sampling (edge time) over real processes and real RPC on 127.0.0.1.

PyG's distributed temporal link-prediction settings: `DistLinkNeighborLoader(disjoint=True,
time_attr='edge_time', temporal_strategy='last', edge_label_time=...)`. Two graphs with one
distinct time per edge, a homogeneous one and a user–rates–movie one (plus its reverse edges),
are partitioned by the project's writer (METIS, 2 parts). Each trainer iterates its links with
binary negatives through one sampler process per part and compares every batch with the
single-machine reference on the unpartitioned graph: PyG's own `edge_sample` (its link
bookkeeping: a tree per endpoint, seed times, `edge_label_index`, tree ids modulo the
positives) over the local multi-hop driver, whose hop keeps, of a node's in-edges not later
than its tree's time, the `k` latest (the 'last' strategy, written here from its definition).
Given the same links and negatives the batches must be equal id for id: nodes and features per
type, edges and edge ids per edge type, tree ids, `edge_label_index`, `edge_label`,
`edge_label_time`, `input_id`; and on global ids no sampled edge is later than its link. A
triplet epoch must point `src_index` / `dst_pos_index` / `dst_neg_index` at the right trees.
The same file is the child-process entry, as in `test_dist_temporal.py`.
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
from torch_geometric.data import Data, HeteroData  # noqa: E402

from tests.helpers import dist_procs  # noqa: E402
from tests.helpers.dist_graphs import node_features, random_graph  # noqa: E402
from tests.helpers.ports import free_port  # noqa: E402
from tests.helpers.temporal import last_hop  # noqa: E402

pytestmark = [pytest.mark.dist, pytest.mark.long]  # a job per graph: ~30 s each
TIMEOUT_S = 150  # hard bound on the whole job (the machine may be heavily shared)
FANOUT = [3, 2]
RATES = ("user", "rates", "movie")
NUM_LINKS = 48
RATIO = {"binary": 1.0, "triplet": 2}


@dataclass
class TemporalLinkJob(dist_procs.Job):
    """`dist_procs.Job` whose processes run this file (so they know `check_temporal_link`)."""

    script: str = __file__


def _graphs() -> dict:
    gen = torch.Generator().manual_seed(7)
    homo = random_graph(400, 6, seed=3)
    rates = torch.stack(
        [torch.randint(150, (1500,), generator=gen), torch.randint(100, (1500,), generator=gen)]
    )
    return {
        "homo": {"edge_index": homo, "x": node_features(400),
                 "edge_time": torch.randperm(homo.size(1), generator=gen)},
        "hetero": {"num_nodes": {"user": 150, "movie": 100}, "rates": rates,
                   "x": {"user": node_features(150, 4), "movie": node_features(100, 4)},
                   "time": torch.randperm(1500, generator=gen),
                   "rating": torch.randint(1, 6, (1500,), generator=gen).float()},
    }  # fmt: skip


def _data(g: dict, kind: str) -> Data | HeteroData:
    g = g[kind]
    if kind == "homo":
        return Data(x=g["x"], edge_index=g["edge_index"], edge_time=g["edge_time"])
    data = HeteroData()
    for t, x in g["x"].items():
        data[t].x = x
    data[RATES].edge_index, data[RATES].edge_time = g["rates"], g["time"]
    rev = ("movie", "rev_rates", "user")
    data[rev].edge_index, data[rev].edge_time = g["rates"].flip(0), g["time"]
    return data


@pytest.mark.parametrize("kind", ["homo", "hetero"])
def test_temporal_links_equal_pyg_local_sampling(tmp_path, kind):
    from app.partition.writer import partition_graph

    graphs = _graphs()
    partition_graph(_data(graphs, kind), tmp_path / "part", 2, method="metis")
    torch.save(graphs, tmp_path / "graph.pt")
    spec = dist_procs.write_spec(
        tmp_path / "spec.json", root=str(tmp_path / "part"), graph=str(tmp_path / "graph.pt"),
        num_parts=2, num_workers=1, port=free_port(), dir=str(tmp_path), timeout=20.0,
        batch_size=16, check="check_temporal_link", kind=kind,
    )  # fmt: skip
    with TemporalLinkJob(spec, 2, 1) as job:
        codes = job.wait(TIMEOUT_S)
        assert all(c == 0 for c in codes.values()), job.report()
        for p in range(2):
            assert "CHECKS OK" in job.tail(f"trainer{p}-0"), job.report()


# -- the reference: PyG's edge_sample over the local driver, 'last' by edge time ----------------


def _reference(data, raw: dict, et):
    """PyG's `edge_sample` of the distributed batch's own links and negatives (given as
    labelled links: the negatives are drawn in the trainer)."""
    from torch_geometric.sampler import EdgeSamplerInput
    from torch_geometric.sampler.neighbor_sampler import edge_sample

    from app.loader.batch import LocalGather
    from app.sampler.neighbor import sample_multi_hop, sample_multi_hop_hetero

    n = raw["input_id"].numel()
    time = raw["time"].repeat(2)[: raw["src"].numel()]
    inputs = EdgeSamplerInput(raw["input_id"], raw["src"], raw["dst"], raw["edge_label"], time,
                              input_type=et)  # fmt: skip
    if et is None:
        hop = last_hop(data.edge_index, data.edge_time)

        def sample_fn(seeds, seed_time):
            return sample_multi_hop(seeds, FANOUT, hop, data.num_nodes, True, seed_time)

        num_nodes = data.num_nodes
    else:
        hops = {e: last_hop(data[e].edge_index, data[e].edge_time) for e in data.edge_types}
        num_nodes = {t: data[t].num_nodes for t in data.node_types}

        def sample_fn(seeds, seed_time):
            fan = {e: FANOUT for e in hops}
            return sample_multi_hop_hetero(seeds, fan, hops, num_nodes, True, seed_time)

    out = edge_sample(inputs, sample_fn, num_nodes, disjoint=True)
    out.batch = {k: b % n for k, b in out.batch.items()} if et else out.batch % n
    return LocalGather(data).to_batch(out, et, link="binary")


def _check_binary(b, ref, et, g_time: dict) -> None:
    same = [(b, ref, None)] if et is None else [(b[t], ref[t], t) for t in ref.node_types]
    for got, want, t in same:
        for key in ("n_id", "x", "batch"):
            assert torch.equal(got[key], want[key]), f"{t}.{key} differs from PyG's local sample"
    edges = [(b, ref, None)] if et is None else [(b[e], ref[e], e) for e in ref.edge_types]
    for got, want, e in edges:
        assert torch.equal(got.edge_index, want.edge_index), f"{e}: edges differ"
        assert torch.equal(got.e_id, want.e_id), f"{e}: edge ids differ"
        tree_time = (b if et is None else b[e[-1]]).batch[got.edge_index[1]]
        link_time = (b if et is None else b[et]).edge_label_time[tree_time]
        assert bool((g_time[e][got.e_id] <= link_time).all()), f"{e}: an edge after its link"
    store, want = (b, ref) if et is None else (b[et], ref[et])
    for key in ("edge_label_index", "edge_label", "edge_label_time", "input_id"):
        assert torch.equal(store[key], want[key]), f"{key} differs from PyG's local sample"


def _check_triplet(b, raw: dict, et) -> None:
    """Every index points at the tree of its link's endpoint (a tree per endpoint)."""
    n = raw["input_id"].numel()
    s, d = (b, b) if et is None else (b[et[0]], b[et[-1]])
    seeds_s = s.n_id[: s.num_sampled_nodes[0]]
    seeds_d = d.n_id[: d.num_sampled_nodes[0]]
    assert torch.equal(seeds_s[s.src_index], raw["src"]), "src_index: not the positives' sources"
    assert torch.equal(seeds_d[d.dst_pos_index], raw["dst"]), "dst_pos_index: not their targets"
    assert torch.equal(seeds_d[d.dst_neg_index], raw["dst_neg"]), "dst_neg_index: wrong negatives"
    assert torch.equal(s.batch[s.src_index], torch.arange(n)), "a source outside its link's tree"
    assert torch.equal(
        d.batch[d.dst_neg_index], torch.arange(n).view(-1, 1).expand_as(raw["dst_neg"])
    )


def check_temporal_link(rt, spec: dict) -> int:
    """A shuffled binary epoch compared with PyG's reference, a triplet epoch."""
    from app.distributed import DistContext, DistLinkNeighborLoader, shutdown
    from app.sampler.kernel import derive_seed

    graphs = torch.load(spec["graph"])
    ctx = DistContext.from_runtime(rt)
    kw = dist_procs._loader_kwargs(rt, spec, ctx)
    failed, batches = True, 0
    kind = spec["kind"]
    et = None if kind == "homo" else RATES
    data = _data(graphs, kind)
    store = data if et is None else data[et]
    g_time = {e: data[e].edge_time for e in data.edge_types} if et else {None: data.edge_time}
    links = store.edge_index[:, rt.node_rank * NUM_LINKS :][:, :NUM_LINKS]
    times = store.edge_time[rt.node_rank * NUM_LINKS :][:NUM_LINKS]
    label = (
        None if et is None else graphs["hetero"]["rating"][rt.node_rank * NUM_LINKS :][:NUM_LINKS]
    )
    try:
        for mode in ("binary", "triplet"):
            loader = DistLinkNeighborLoader(
                spec["root"], FANOUT, edge_label_index=links if et is None else (et, links),
                edge_label=label if mode == "binary" else None, edge_label_time=times,
                neg_sampling=mode, neg_sampling_ratio=RATIO[mode], disjoint=True,
                time_attr="edge_time", temporal_strategy="last", shuffle=True, **kw,
            )  # fmt: skip
            for i, b in enumerate(loader):
                ids = b.input_id if et is None else b[et].input_id
                raw = loader.inputs.batch(ids, derive_seed(5, 0, i))
                if mode == "binary":
                    _check_binary(b, _reference(data, raw, et), et, g_time)
                else:
                    _check_triplet(b, raw, et)
                batches += 1
            loader.close()
        failed = False
    finally:
        shutdown(ctx, 60.0, failed)
    print(f"CHECKS OK {batches} batches", flush=True)
    return 0


if __name__ == "__main__":
    dist_procs.CHECKS["check_temporal_link"] = check_temporal_link
    sys.exit(dist_procs.main())
