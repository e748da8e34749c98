"""Distributed heterogeneous link sampling over real processes and real RPC on 127.0.0.1.

A small author/paper graph is partitioned by the project's writer (METIS, 2 parts); each trainer
iterates `DistLinkNeighborLoader(edge_label_index=(edge_type, links))` with full fan-out through
one sampler process per part, for a bipartite link type (author → paper: seeds per end type) and
a same-type one (paper → paper: one seed set), and compares every batch with the single-machine
sampler on the unpartitioned graph, given the same links, negatives and seed. Binary batches go
through the local link pipeline (`NeighborSampler.sample_from_edges` + `LocalGather`) and must
equal it field for field: node ids and features per type, edges and edge ids per edge type,
`edge_label_index`, `edge_label`, `input_id`. Triplet batches must hold the local sample of the
same seeds, and their `src_index` / `dst_pos_index` / `dst_neg_index` must point at the batch's
positives and negatives. The same file is the child-process entry (`python
tests/dist/test_dist_hetero_link.py SPEC ROLE NODE WORKER`), as in `test_dist_temporal.py`.
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
from torch_geometric.data import HeteroData  # noqa: E402

from tests.helpers import dist_procs  # noqa: E402
from tests.helpers.dist_graphs import hetero_graph  # noqa: E402
from tests.helpers.ports import free_port  # noqa: E402

pytestmark = pytest.mark.dist
TIMEOUT_S = 150  # hard bound on the whole job (the machine may be heavily shared)
FANOUT = [-1, -1]
LINK_TYPES = [("author", "writes", "paper"), ("paper", "cites", "paper")]
NUM_LINKS = 40


@dataclass
class HeteroLinkJob(dist_procs.Job):
    """`dist_procs.Job` whose processes run this file (so they know `check_hetero_link`)."""

    script: str = __file__


def _partition(tmp_path: Path, graph: dict) -> str:
    from app.partition.writer import partition_graph

    partition_graph(_hetero_data(graph), tmp_path / "part", 2, method="metis")
    return str(tmp_path / "part")


def test_hetero_link_equals_local_sampling(tmp_path):
    graph = hetero_graph()
    _partition(tmp_path, graph)
    torch.save(graph, tmp_path / "graph.pt")
    spec = dist_procs.write_spec(
        tmp_path / "spec.json", root=str(tmp_path / "part"), graph=str(tmp_path / "graph.pt"),
        num_parts=2, num_workers=1, port=free_port(), dir=str(tmp_path), timeout=20.0,
        batch_size=16, check="check_hetero_link",
    )  # fmt: skip
    with HeteroLinkJob(spec, 2, 1) as job:
        codes = job.wait(TIMEOUT_S)
        assert all(c == 0 for c in codes.values()), job.report()
        for p in range(2):
            assert "CHECKS OK" in job.tail(f"trainer{p}-0"), job.report()


def test_hetero_loader_refuses_missing_edge_type(tmp_path):
    from app.distributed import DistLinkNeighborLoader

    graph = hetero_graph()
    root = _partition(tmp_path, graph)
    links = graph["edge_index"][LINK_TYPES[0]][:, :4]
    with pytest.raises(ValueError, match=r"edge_label_index=\(edge_type, \[2, E\] ids\)"):
        DistLinkNeighborLoader(root, FANOUT, edge_label_index=links)
    with pytest.raises(ValueError, match="got edge type"):
        DistLinkNeighborLoader(root, FANOUT, edge_label_index=(("a", "b", "c"), links))


# -- inside the trainer processes -----------------------------------------------------------------


def _hetero_data(g: dict) -> HeteroData:
    data = HeteroData()
    for t, n in g["num_nodes"].items():
        data[t].num_nodes = n
    for t, x in g["x"].items():
        data[t].x = x
    for t, y in g["y"].items():
        data[t].y = y
    for et, ei in g["edge_index"].items():  # same order as the partition's edge types
        data[et].edge_index = ei
    return data


def _same_sample(b, ref) -> None:
    """Node ids per type and edges / edge ids per edge type, id for id."""
    for t in ref.node_types:
        assert torch.equal(b[t].n_id, ref[t].n_id), f"{t}: sampled nodes differ from local"
        for key in ("x", "y"):
            if key in ref[t]:
                assert torch.equal(b[t][key], ref[t][key]), f"{t}.{key} differs from local"
    for et in ref.edge_types:
        assert torch.equal(b[et].edge_index, ref[et].edge_index), f"{et}: edges differ"
        assert torch.equal(b[et].e_id, ref[et].e_id), f"{et}: edge ids differ"


def _check_binary(b, raw: dict, et, local, gather, seed: int) -> None:
    from torch_geometric.sampler import EdgeSamplerInput

    inputs = EdgeSamplerInput(
        raw["input_id"], raw["src"], raw["dst"], raw["edge_label"], input_type=et
    )
    ref = gather.to_batch(local.sample_from_edges(inputs, None, seed), et, link="binary")
    _same_sample(b, ref)
    for key in ("edge_label_index", "edge_label", "input_id"):
        assert torch.equal(b[et][key], ref[et][key]), f"{et}.{key} differs from local"
    n = raw["input_id"].numel()
    assert b[et].edge_label_index.size(1) == 2 * n, "binary ratio 1.0: one negative per positive"


def _check_triplet(b, raw: dict, et, local, seed: int) -> None:
    src, dst = raw["src"], torch.cat([raw["dst"], raw["dst_neg"].reshape(-1)])
    if et[0] == et[-1]:
        seeds = {et[0]: torch.cat([src, dst]).unique()}
    else:
        seeds = {et[0]: src.unique(), et[-1]: dst.unique()}
    out = local.sample(seeds, seed=seed)
    for t, node in out.node.items():
        assert torch.equal(b[t].n_id, node), f"{t}: sampled nodes differ from local"
    for e, row in out.row.items():
        assert torch.equal(b[e].edge_index, torch.stack([row, out.col[e]])), f"{e}: edges differ"
    s, d = b[et[0]], b[et[-1]]
    assert torch.equal(s.n_id[s.src_index], raw["src"]), "src_index is not the positives' sources"
    assert torch.equal(d.n_id[d.dst_pos_index], raw["dst"]), "dst_pos_index is not their targets"
    assert torch.equal(d.n_id[d.dst_neg_index], raw["dst_neg"]), "dst_neg_index: wrong negatives"
    assert b[et].input_id.equal(raw["input_id"])


def check_hetero_link(rt, spec: dict) -> int:
    """Both link types, binary and triplet, one shuffled epoch each."""
    from app.distributed import DistContext, DistLinkNeighborLoader, shutdown
    from app.loader.batch import LocalGather
    from app.sampler.kernel import derive_seed
    from app.sampler.neighbor import NeighborSampler

    g = torch.load(spec["graph"])
    data = _hetero_data(g)
    local, gather = NeighborSampler(data, FANOUT), LocalGather(data)
    ctx = DistContext.from_runtime(rt)
    kw = dist_procs._loader_kwargs(rt, spec, ctx)
    failed, batches = True, 0
    try:
        for et in LINK_TYPES:
            links = g["edge_index"][et][:, rt.node_rank * NUM_LINKS :][:, :NUM_LINKS]
            for mode, ratio in (("binary", 1.0), ("triplet", 2)):
                loader = DistLinkNeighborLoader(
                    spec["root"], FANOUT, edge_label_index=(et, links), neg_sampling=mode,
                    neg_sampling_ratio=ratio, shuffle=True, **kw,
                )  # fmt: skip
                for i, b in enumerate(loader):
                    seed = derive_seed(5, 0, i)
                    ids = b[et].input_id
                    raw = loader.inputs.batch(ids, seed)
                    if mode == "binary":
                        _check_binary(b, raw, et, local, gather, seed)
                    else:
                        _check_triplet(b, raw, et, local, seed)
                    batches += 1
                loader.close()
        failed = False
    finally:
        shutdown(ctx, 60.0, failed)
    print(f"CHECKS OK {batches} batches", flush=True)
    return 0


if __name__ == "__main__":
    dist_procs.CHECKS["check_hetero_link"] = check_hetero_link
    sys.exit(dist_procs.main())
