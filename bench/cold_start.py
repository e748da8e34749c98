"""Cold start: time to the first batch and first-epoch time of a hand-launched 2-rank job.

`python -m bench.cold_start` (DISTGNN_BENCH_NODES: graph size, default 200k). Each rank is a
PyG-style script process (as PyG's `node_ogb_cpu.py`): load its partition's stores, join a
gloo group, build `DistNeighborLoader(num_workers=1)` (fan-out [15, 10, 5], batch 1024, its
partition's training nodes) and train a GraphSAGE for two epochs. Both ranks run at once.
Timed from the script's first line: imports, loading, loader construction, the first batch,
epoch 1 and epoch 2. Conditions, side by side in one run:

* `ours_fresh`: an empty kernel cache (`DISTGNN_CACHE_DIR`): every kernel compiles;
* `ours_installed`: an empty cache warmed by `python -m app.jit` first, untimed, as
  `make install` does on a fresh clone;
* `pyg`: PyG's `torch_geometric.distributed` on a partition of its own `Partitioner` (only
  where pyg-lib is importable: PyG samples with it).

Recorded per condition (the slower rank): seconds to the first batch from the script's start and
from the loader's construction, epoch 1, epoch 2, and epoch 1 / epoch 2; ours against PyG.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0 = time.perf_counter()  # a rank's clock starts with its script, before its imports

ROOT = Path(__file__).resolve().parents[1]
BENCH = "cold_start"
FANOUT = [15, 10, 5]
BATCH = 1024
EPOCHS = 2
RUN_TIMEOUT_S = 900


def _data(num_nodes: int):
    from app.config import DatasetConfig
    from app.dataset import load_dataset

    cfg = DatasetConfig(
        name="synthetic_products", num_nodes=num_nodes, avg_degree=22.0, root="data"
    )
    return load_dataset(cfg, seed=0)


def _partition(impl: str, data, out: Path) -> None:
    """`impl`'s own Partitioner into `out`, plus the labels and each rank's training ids."""
    import torch

    if impl == "pyg":
        from torch_geometric.distributed import Partitioner
    else:
        from app.distributed import Partitioner
    if not (out / "parts").exists():
        Partitioner(data, 2, str(out / "parts")).generate_partition()
    torch.save(data.y, out / "labels.pt")
    train = data.train_mask.nonzero().view(-1)
    for rank, idx in enumerate(train.chunk(2)):
        torch.save(idx.clone(), out / f"train{rank}.pt")


def _child(impl: str, rank: int, root: str, ports: str, out: str) -> None:
    """One rank: `impl`'s stores, loader and two epochs; its marks into `out` (JSON).

    PyG's loader runs with `persistent_workers=True`, as PyG's `node_ogb_cpu.py` does: without
    it every epoch forks a new sampling worker that joins the RPC group again at the same
    master port, whose store still holds the first epoch's gloo addresses; the new worker
    connects to the dead worker's port (connection refused), and the other rank's worker, whose
    peer is gone (TensorPipe EOF), never answers: its trainer waits on the channel forever.
    """
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GraphSAGE

    if impl == "pyg":
        import torch_geometric.distributed as dist
        from torch_geometric.distributed import dist_neighbor_sampler
        from torch_geometric.distributed.partition import load_partition_info

        # PyG 2.8.1's deprecation notice calls warnings.warn(stack_level=...): a TypeError
        # that stops every DistNeighborLoader; drop the notice, nothing else
        dist_neighbor_sampler.warn = lambda *args, **kwargs: None
    else:
        import app.distributed as dist
        from app.distributed.partition import load_partition_info
    marks = {"import": time.perf_counter() - T0}
    ddp, rpc_port = (int(p) for p in ports.split(","))
    parts = os.path.join(root, "parts")
    graph = dist.LocalGraphStore.from_partition(parts, rank)
    feature = dist.LocalFeatureStore.from_partition(parts, rank)
    meta, num_parts, idx, node_pb, edge_pb = load_partition_info(parts, rank)
    graph.num_partitions = feature.num_partitions = num_parts
    graph.partition_idx = feature.partition_idx = idx
    graph.node_pb = feature.node_feat_pb = feature.feature_pb = node_pb
    graph.edge_pb = feature.edge_feat_pb = edge_pb
    graph.meta = feature.meta = meta
    graph.labels = feature.labels = torch.load(os.path.join(root, "labels.pt"))  # PyG: feature
    train = torch.load(os.path.join(root, f"train{rank}.pt"))
    ctx = dist.DistContext(world_size=2, rank=rank, global_world_size=2, global_rank=rank,
                           group_name="cold-start")  # fmt: skip
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2,
                                         init_method=f"tcp://127.0.0.1:{ddp}")  # fmt: skip
    marks["load"] = time.perf_counter() - T0
    loader = dist.DistNeighborLoader(
        data=(feature, graph), num_neighbors=FANOUT, input_nodes=train, batch_size=BATCH,
        shuffle=True, num_workers=1, concurrency=2, master_addr="127.0.0.1",
        master_port=rpc_port, current_ctx=ctx, async_sampling=True, filter_per_worker=False,
        persistent_workers=True,  # PyG: see _child's docstring; ours: its samplers persist anyway
    )  # fmt: skip
    marks["construct"] = time.perf_counter() - T0
    model = GraphSAGE(-1, 64, 3, 47)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    for epoch in range(EPOCHS):
        start = time.perf_counter()
        for batch in loader:
            marks.setdefault("first_batch", time.perf_counter() - T0)
            optimizer.zero_grad()
            bs = batch.batch_size
            loss = F.cross_entropy(model(batch.x, batch.edge_index)[:bs], batch.y[:bs])
            loss.backward()
            optimizer.step()
        marks[f"epoch{epoch + 1}"] = time.perf_counter() - start
    Path(out).write_text(json.dumps(marks))
    torch.distributed.barrier()
    if impl != "pyg":  # PyG's loader has no close(): its workers end with the script
        loader.close()
    torch.distributed.destroy_process_group()


def _wait_all(procs: list[subprocess.Popen], timeout_s: float) -> None:
    """Until every rank has exited; the first failed rank stops the wait (the other would wait
    for its batches forever)."""
    deadline = time.monotonic() + timeout_s
    while any(p.poll() is None for p in procs):
        if any(p.returncode for p in procs) or time.monotonic() > deadline:
            return
        time.sleep(0.2)


def _run(impl: str, root: Path, env: dict[str, str], work: Path) -> dict[str, float]:
    """Both ranks at once; the slower rank's marks."""
    from tests.helpers.ports import free_port

    ports = f"{free_port()},{free_port()}"
    procs, outs = [], []
    for rank in (0, 1):
        out = work / f"{impl}_rank{rank}.json"
        out.unlink(missing_ok=True)
        outs.append(out)
        cmd = [sys.executable, "-m", "bench.cold_start", "--child", impl, str(rank), str(root),
               ports, str(out)]  # fmt: skip
        with open(work / f"{impl}_rank{rank}.log", "w") as log:  # a session: rank + samplers
            procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log,
                                          start_new_session=True))  # fmt: skip
    try:
        _wait_all(procs, RUN_TIMEOUT_S)
    finally:
        for p in procs:  # the rank's sampler processes too (a failed rank's may linger)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    if not all(o.exists() for o in outs):
        raise RuntimeError(f"{impl}: a rank failed; see {work}/{impl}_rank*.log")
    ranks = [json.loads(o.read_text()) for o in outs]
    return {k: max(r[k] for r in ranks) for k in ranks[0]}


def _record(name: str, marks: dict[str, float], ref: dict[str, float] | None) -> None:
    from bench.common import record

    first = marks["first_batch"]
    after = first - marks["load"]  # loader construction + the first batch
    record(BENCH, f"{name}_first_batch_s", first, "s", ref and "pyg_first_batch_s",
           ref and first / ref["first_batch"])  # fmt: skip
    record(BENCH, f"{name}_first_batch_after_load_s", after, "s",
           ref and "pyg_first_batch_after_load_s",
           ref and after / (ref["first_batch"] - ref["load"]))  # fmt: skip
    record(BENCH, f"{name}_construct_s", marks["construct"] - marks["load"], "s")
    record(BENCH, f"{name}_epoch1_s", marks["epoch1"], "s", f"{name}_epoch2_s",
           marks["epoch1"] / marks["epoch2"])  # fmt: skip
    record(BENCH, f"{name}_epoch2_s", marks["epoch2"], "s", ref and "pyg_epoch2_s",
           ref and marks["epoch2"] / ref["epoch2"])  # fmt: skip
    if ref:
        record(BENCH, f"{name}_epoch1_vs_pyg", marks["epoch1"], "s", "pyg_epoch1_s",
               marks["epoch1"] / ref["epoch1"])  # fmt: skip


def main() -> None:
    num_nodes = int(os.environ.get("DISTGNN_BENCH_NODES", 200_000))
    base = ROOT / "outputs" / "bench" / BENCH
    base.mkdir(parents=True, exist_ok=True)
    with_pyg = importlib.util.find_spec("pyg_lib") is not None
    data = _data(num_nodes)
    print(f"graph: {data.num_nodes:,} nodes, {data.num_edges:,} edges; PyG: {with_pyg}")
    _partition("ours", data, base / f"ours_{num_nodes}")
    if with_pyg:
        _partition("pyg", data, base / f"pyg_{num_nodes}")
    del data
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="distgnn-cold-") as tmp:
        fresh = dict(env, DISTGNN_CACHE_DIR=str(Path(tmp, "fresh")))
        installed = dict(env, DISTGNN_CACHE_DIR=str(Path(tmp, "installed")))
        subprocess.run([sys.executable, "-m", "app.jit"], cwd=ROOT, env=installed, check=True)
        results["ours_fresh"] = _run("ours", base / f"ours_{num_nodes}", fresh, base)
        results["ours_installed"] = _run("ours", base / f"ours_{num_nodes}", installed, base)
    if with_pyg:
        results["pyg"] = _run("pyg", base / f"pyg_{num_nodes}", env, base)
    ref = results.get("pyg")
    for name, marks in results.items():
        print(name, {k: round(v, 2) for k, v in marks.items()}, flush=True)
        if name != "pyg":
            _record(name, marks, ref)
    if ref:
        _record("pyg", ref, None)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.path.insert(0, str(ROOT))
        _child(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6])
        sys.exit(0)
    main()
