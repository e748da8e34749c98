"""Distributed layer-wise inference over real processes, real RPC and a real gloo group.

A small homogeneous graph (METIS) and a small heterogeneous one (random assignment, with a
2-node featureless type so some partition owns none of it) are partitioned by the project's
writer into 1, 2 and 3 parts. Each trainer builds `partition_view`, runs
`layerwise_logits` / `evaluate_layerwise` for SAGE, GCN and GAT (homogeneous) and HeteroSAGE
with `DistEmbedding` inputs (heterogeneous), and compares its rows with the single-process
full-graph forward of the same model (same seed) within 1e-4 relative, and the all-reduced
accuracies with the reference's; link predictors' triplet scores of each rank's own pairs
(`app.task.link.triplet_results` over distributed layer-wise embeddings) likewise. The file is also the child-process entry (`python
tests/dist/test_layerwise_dist.py SPEC ROLE NODE WORKER`), through `tests/helpers/dist_procs.py`.
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
from tests.helpers.dist_graphs import random_graph  # noqa: E402
from tests.helpers.ports import free_port  # noqa: E402

pytestmark = pytest.mark.dist
TIMEOUT_S = 240  # hard bound on the whole job (the machine may be heavily shared)
CHUNK = 37  # smaller than every partition: several chunks per layer
HIDDEN, CLASSES, EMB = 8, 4, 6


@dataclass
class LayerwiseJob(dist_procs.Job):
    """`dist_procs.Job` whose processes run this file (so they know `check_layerwise`)."""

    script: str = __file__


def _masks(n: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    split = torch.randint(0, 3, (n,), generator=gen)
    return {f"{s}_mask": split == i for i, s in enumerate(("train", "val", "test"))}


def homo_data() -> Data:
    n, gen = 240, torch.Generator().manual_seed(1)
    data = Data(
        x=torch.randn(n, 5, generator=gen),
        y=torch.randint(0, CLASSES, (n,), generator=gen),
        edge_index=random_graph(n, 5, seed=3),
        num_nodes=n,
    )
    for k, v in _masks(n, gen).items():
        data[k] = v
    return data


def hetero_data() -> HeteroData:
    gen = torch.Generator().manual_seed(2)
    data = HeteroData()
    data["paper"].x = torch.randn(150, 5, generator=gen)
    data["paper"].y = torch.randint(0, CLASSES, (150,), generator=gen)
    for k, v in _masks(150, gen).items():
        data["paper"][k] = v
    data["author"].num_nodes = 90
    data["field"].num_nodes = 2
    writes = torch.stack(
        [torch.randint(90, (400,), generator=gen), torch.randint(150, (400,), generator=gen)]
    )
    topic = torch.stack(
        [torch.randint(150, (100,), generator=gen), torch.randint(2, (100,), generator=gen)]
    )
    data["paper", "cites", "paper"].edge_index = torch.randint(150, (2, 500), generator=gen)
    data["author", "writes", "paper"].edge_index = writes
    data["paper", "rev_writes", "author"].edge_index = writes.flip(0)
    data["paper", "has_topic", "field"].edge_index = topic
    data["field", "rev_has_topic", "paper"].edge_index = topic.flip(0)
    return data


def homo_model(kind: str):
    from app.model.gnn import SampledGNN

    torch.manual_seed(11)
    return SampledGNN(kind, 5, HIDDEN, CLASSES, 2, dropout=0.5, heads=2)


def hetero_gnn(data: HeteroData):
    from app.model.hetero import HeteroSAGE

    torch.manual_seed(12)
    widths = {"paper": 5, "author": EMB, "field": EMB}
    return HeteroSAGE(data.metadata(), widths, HIDDEN, CLASSES, 3, dropout=0.5)


def embedding_rows(data: HeteroData) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(13)
    return {t: torch.randn(data[t].num_nodes, EMB, generator=gen) for t in ("author", "field")}


def reference_accuracy(logits: torch.Tensor, store) -> dict[str, float]:
    pred = logits.argmax(-1)
    return {
        f"{s}_acc": float((pred[store[f"{s}_mask"]] == store.y[store[f"{s}_mask"]]).float().mean())
        for s in ("val", "test")
    }


# make test: 1 and 3 parts (3 has several peers per remote row fetch); 2 in make test-long
@pytest.mark.parametrize("num_parts", [1, pytest.param(2, marks=pytest.mark.long), 3])
def test_layerwise_equals_full_forward(tmp_path, num_parts):
    from app.partition.writer import partition_graph

    partition_graph(homo_data(), tmp_path / "homo", num_parts, method="metis")
    partition_graph(hetero_data(), tmp_path / "hetero", num_parts, method="random")
    spec = dist_procs.write_spec(
        tmp_path / "spec.json", root=str(tmp_path / "homo"), hetero_root=str(tmp_path / "hetero"),
        num_parts=num_parts, num_workers=0, port=free_port(), ddp_port=free_port(),
        dir=str(tmp_path), timeout=30.0, check="check_layerwise",
    )  # fmt: skip
    with LayerwiseJob(spec, num_parts, 0) as job:
        codes = job.wait(TIMEOUT_S)
        assert all(c == 0 for c in codes.values()), job.report()
        for p in range(num_parts):
            assert "CHECKS OK" in job.tail(f"trainer{p}-0"), job.report()


# -- inside the trainer processes -----------------------------------------------------------------


def _close(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    err = float((got - ref).abs().max()) if got.numel() else 0.0
    scale = float(ref.abs().max()) if ref.numel() else 1.0
    assert err <= 1e-4 * max(scale, 1e-6), f"{what}: max error {err} (scale {scale})"


def _join(rt, spec: dict):
    from datetime import timedelta

    from app.distributed import DistContext
    from app.distributed.rpc import init_rpc

    ctx = DistContext.from_runtime(rt)
    init_rpc(ctx, "127.0.0.1", spec["port"], timeout_s=spec["timeout"], init_timeout_s=60.0)
    store = torch.distributed.TCPStore(
        "127.0.0.1", spec["ddp_port"], rt.world_size, is_master=rt.rank == 0,
        timeout=timedelta(seconds=60), wait_for_workers=True,
    )  # fmt: skip
    torch.distributed.init_process_group(
        "gloo", store=store, rank=rt.rank, world_size=rt.world_size, timeout=timedelta(seconds=60)
    )
    return ctx


def _check_homo(ctx, spec: dict) -> None:
    from app.inference import evaluate_layerwise, layerwise_logits, partition_view
    from app.model.gnn import SampledGNN
    from app.partition.reader import load_partition

    data = homo_data()
    view = partition_view(load_partition(spec["root"], ctx.partition_idx), ctx)
    for kind in ("sage", "gcn", "gat"):
        model = homo_model(kind).eval()
        ref = model(data.x, data.edge_index)
        got = layerwise_logits(model, view, CHUNK)
        _close(got, ref[view.mine[view.target]], f"{kind}, part {ctx.partition_idx}")
        acc = evaluate_layerwise(model, view, CHUNK)
        assert acc == pytest.approx(reference_accuracy(ref, data)), f"{kind}: {acc}"
    model = homo_model("sage").eval()
    for step in range(2):  # kept buffers (fetched halo rows too): the second pass writes them again
        ref = model(data.x, data.edge_index)
        got = layerwise_logits(model, view, CHUNK, keep_buffers=True)
        _close(got, ref[view.mine[view.target]], f"kept buffers, pass {step}")
        torch.nn.init.normal_(model.layers[0].lin_neigh.weight)  # the next pass sees new weights
    torch.manual_seed(14)
    # one layer that narrows (5 -> 4): layer 0 reads the inputs' projections
    narrow = SampledGNN("sage", 5, HIDDEN, CLASSES, 1).eval()
    ref = narrow(data.x, data.edge_index)
    _close(layerwise_logits(narrow, view, CHUNK), ref[view.mine[view.target]], "1-layer sage")
    # both layers narrow (5 -> 3 -> 2): the inputs' projections and layer 0's projected output
    # are tables at once; twice, with kept buffers, as a job's evaluations run
    both = SampledGNN("sage", 5, 3, 2, 2).eval()
    ref = both(data.x, data.edge_index)[view.mine[view.target]]
    for step in range(2):
        got = layerwise_logits(both, view, CHUNK, keep_buffers=True)
        _close(got, ref, f"two narrowing layers, pass {step}")
    from app.model.link import Decoder, LinkPredictor

    link = LinkPredictor(homo_model("sage"), Decoder("mlp", CLASSES)).eval()
    _check_link(ctx, link, view, link.encoder(data.x, data.edge_index), None)
    view.close()


def _check_link(ctx, model, view, z_src, z_dst) -> None:
    """Triplet scores of this rank's own pairs from distributed layer-wise embeddings equal the
    full-graph embeddings' (`z_dst` None: the same table)."""
    from app.inference import layerwise_embeddings
    from app.task.link import triplet_results

    z_dst = z_src if z_dst is None else z_dst
    gen = torch.Generator().manual_seed(40 + ctx.partition_idx)
    num = 5 + 4 * ctx.partition_idx  # ranks score different numbers of pairs
    pos = torch.stack([torch.randint(z_src.size(0), (num,), generator=gen),
                       torch.randint(z_dst.size(0), (num,), generator=gen)])  # fmt: skip
    neg = torch.randint(z_dst.size(0), (num, 3), generator=gen)
    rows = layerwise_embeddings(model, view, CHUNK)
    found = list(triplet_results(model, rows, pos, neg, model.edge_type, chunk_size=8))
    rows.close()
    got = torch.cat([r.scores.view(2, -1).t() for r in found])
    ref = torch.stack([model.score(z_src[pos[0]], z_dst[pos[1]]),
                       model.score(z_src[pos[0]], z_dst[neg[:, 0]])], dim=1)  # fmt: skip
    _close(got, ref, f"link scores, part {ctx.partition_idx}")


def _check_hetero(ctx, spec: dict) -> None:
    from app.distributed.embedding import DistEmbedding
    from app.inference import evaluate_layerwise, layerwise_logits, partition_view
    from app.model.hetero import HeteroNodeClassifier
    from app.partition.reader import load_partition

    data = hetero_data()
    part = load_partition(spec["hetero_root"], ctx.partition_idx)
    full = embedding_rows(data)

    def shard(t: str):
        owned = part.book[t].partition_of(torch.arange(data[t].num_nodes)) == ctx.partition_idx
        return lambda shape, dtype: full[t][owned].clone()

    tables = {
        t: DistEmbedding(
            data[t].num_nodes,
            EMB,
            f"test_emb_{t}",
            shard(t),
            book=part.book[t],
            part_id=ctx.partition_idx,
        )  # fmt: skip
        for t in full
    }
    gnn = hetero_gnn(data).eval()
    ref = gnn({"paper": data["paper"].x, **full}, data.edge_index_dict)["paper"]

    class Tables:  # the `.tables` interface of NodeEmbeddings / DistNodeEmbeddings
        def __init__(self) -> None:
            self.tables = tables

    model = HeteroNodeClassifier(gnn, Tables(), "paper")  # type: ignore[arg-type]
    view = partition_view(part, ctx)
    torch.distributed.barrier()  # every owner has its embedding shard
    got = layerwise_logits(model, view, CHUNK)
    _close(got, ref[view.mine["paper"]], f"hetero, part {ctx.partition_idx}")
    acc = evaluate_layerwise(model, view, CHUNK)
    assert acc == pytest.approx(reference_accuracy(ref, data["paper"])), f"hetero: {acc}"
    from app.model.link import Decoder, HeteroLinkPredictor

    edge_type = ("paper", "has_topic", "field")
    link = HeteroLinkPredictor(gnn, Tables(), edge_type, Decoder("dot", CLASSES)).eval()  # type: ignore[arg-type]
    z = gnn({"paper": data["paper"].x, **full}, data.edge_index_dict)
    _check_link(ctx, link, view, z["paper"], z["field"])
    view.close()


def check_layerwise(rt, spec: dict) -> int:
    from app.distributed.rpc import shutdown_rpc, shutdown_rpc_now

    ctx = _join(rt, spec)
    failed = True
    try:
        _check_homo(ctx, spec)
        _check_hetero(ctx, spec)
        torch.distributed.barrier()
        failed = False
    finally:
        (shutdown_rpc_now if failed else shutdown_rpc)()
        torch.distributed.destroy_process_group()
    print("CHECKS OK", flush=True)
    return 0


if __name__ == "__main__":
    dist_procs.CHECKS["check_layerwise"] = check_layerwise
    sys.exit(dist_procs.main())
