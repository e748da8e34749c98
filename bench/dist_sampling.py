"""Distributed vs local neighbour sampling on one ≥200k-node / ≥4M-edge graph, side by side.

`python -m bench.dist_sampling` (set DISTGNN_BENCH_NODES to change the graph size):

* local: `app.loader.NeighborLoader` on the whole graph in this process (1 partition);
* distributed: a 2-partition METIS job on 127.0.0.1 — 2 trainers running AT ONCE, each with one
  sampler process (`app.distributed.server.serve`), `DistNeighborLoader(num_workers=1)`;

both with fan-out [15, 10, 5], batch 1024, features + labels gathered. Recorded: seeds/s and
sampled edges/s per trainer (and the ratio to local), remote hop requests / bytes and remote
feature rows / bytes per batch, and the summed PSS of one node's processes vs the partition's
on-disk bytes (plus the PSS of an idle process with the same imports = fixed overhead).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = "dist_sampling"
FANOUT = [15, 10, 5]
BATCH = 1024
WARMUP, TIMED = 2, 12


def _graph(num_nodes: int):
    from app.config import DatasetConfig
    from app.dataset import load_dataset

    cfg = DatasetConfig(
        name="synthetic_products", num_nodes=num_nodes, avg_degree=22.0, root="data"
    )
    return load_dataset(cfg, seed=0)


def _partition(data, root: Path, parts: int) -> None:
    from app.partition.writer import partition_graph

    partition_graph(data, root, parts, method="metis")


def _batches(loader):
    """Batches across as many epochs as it takes."""
    while True:
        yield from loader


def _time_batches(loader) -> tuple[float, int, int]:
    """(seconds, seeds, sampled edges) over TIMED batches after WARMUP."""
    it = _batches(loader)
    for _ in range(WARMUP):
        next(it)
    seeds = edges = 0
    start = time.perf_counter()
    for _ in range(TIMED):
        b = next(it)
        seeds += b.batch_size
        edges += b.edge_index.size(1)
    return time.perf_counter() - start, seeds, edges


def _local(data) -> dict:
    from app.loader.node_loader import NeighborLoader

    loader = NeighborLoader(data, FANOUT, input_nodes=None, batch_size=BATCH, shuffle=True)
    cpu = time.process_time()
    secs, seeds, edges = _time_batches(loader)
    cpu = time.process_time() - cpu
    return {
        "seeds_s": seeds / secs,
        "edges_s": edges / secs,
        "cpu_per_batch": cpu / (WARMUP + TIMED),
    }


# -- distributed job ------------------------------------------------------------------------------


def _pss(pids: list[int]) -> int:
    import psutil

    return sum(psutil.Process(p).memory_full_info().pss for p in pids)


def _mapped_pss(pids: list[int], root: Path) -> int:
    """PSS of the partition files' memory maps, summed over processes: the partition's share."""
    import psutil

    prefix = str(root.resolve())
    return sum(
        m.pss
        for p in pids
        for m in psutil.Process(p).memory_maps(grouped=True)
        if m.path.startswith(prefix)
    )


def _disk_bytes(root: Path, part: int) -> int:
    files = list((root / f"part_{part}").glob("*.pt")) + [
        root / "node_map.pt",
        root / "edge_map.pt",
    ]
    return sum(f.stat().st_size for f in files if f.exists())


def _launch(root: Path, workdir: Path, port: int) -> dict[str, subprocess.Popen]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    procs = {}
    for role, node in [("sampler", 0), ("sampler", 1), ("trainer", 0), ("trainer", 1)]:
        name = f"{role}{node}"
        cmd = [
            sys.executable,
            "-m",
            "bench.dist_sampling",
            "--child",
            role,
            str(node),
            str(root),
            str(workdir),
            str(port),
        ]
        with open(workdir / f"{name}.log", "w") as log:
            procs[name] = subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
    return procs


def _wait_files(paths: list[Path], procs: dict, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        dead = {n: p.returncode for n, p in procs.items() if p.poll() not in (None, 0)}
        if dead or time.monotonic() > deadline:
            raise RuntimeError(
                f"distributed bench failed (exit codes {dead}); see the logs in {paths[0].parent}"
            )
        time.sleep(0.2)


def _distributed(root: Path, workdir: Path) -> dict:
    from tests.dist.conftest import free_port

    procs = _launch(root, workdir, free_port())
    try:
        _wait_files([workdir / f"trainer{n}.json" for n in (0, 1)], procs, 900)
        node0 = [procs["trainer0"].pid, procs["sampler0"].pid]
        pss, mapped = _pss(node0), _mapped_pss(node0, root)
        (workdir / "measured").write_text("1")
        for p in procs.values():
            p.wait(120)
        results = [json.loads((workdir / f"trainer{n}.json").read_text()) for n in (0, 1)]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    return {
        "ranks": results,
        "pss_node0": pss,
        "mapped_node0": mapped,
        "disk_node0": _disk_bytes(root, 0),
    }


def _runtime(role: str, node: int, root: str, workdir: str, port: int):
    from app.runtime import Runtime

    return Runtime(role=role, node_rank=node, num_nodes=2, local_rank=0, procs_per_node=1,
                   worker_index=0 if role == "sampler" else -1, num_workers=1,
                   master_addr="127.0.0.1", ddp_port=0, rpc_port=port, job_dir=workdir,
                   config_path="", partition_root=root)  # fmt: skip


def _child(role: str, node: int, root: str, workdir: str, port: int) -> int:
    from app.config import Config
    from app.distributed import DistContext, DistNeighborLoader, rpc, server

    rt = _runtime(role, node, root, workdir, port)
    if role == "sampler":
        return server.serve(rt, Config())
    ctx = DistContext.from_runtime(rt)
    failed = True
    try:
        loader = DistNeighborLoader(root, FANOUT, batch_size=BATCH, shuffle=True, current_ctx=ctx,
                                    num_workers=1, concurrency=2, master_port=port, rpc_timeout=120.0)  # fmt: skip
        worker = loader.workers[0]
        cpu0 = time.process_time(), rpc.call_async(worker, server.remote_stats).wait()["cpu_s"]
        secs, seeds, edges = _time_batches(loader)
        stats = rpc.call_async(worker, server.remote_stats).wait()
        out = {"seeds_s": seeds / secs, "edges_s": edges / secs, "worker": worker,
               "batches": WARMUP + TIMED, "trainer_cpu_s": time.process_time() - cpu0[0],
               "sampler_cpu_s": stats.pop("cpu_s") - cpu0[1], "wall_s": secs, **stats}  # fmt: skip
        Path(workdir, f"trainer{node}.json").write_text(json.dumps(out))
        deadline = time.monotonic() + 120
        while not Path(workdir, "measured").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        failed = False
    finally:
        server.shutdown(ctx, 60.0, failed)
    return 0


IDLE = """
import sys, time
from torch.distributed import rpc
import app.distributed
from app.sampler.kernel import warmup
from tests.dist.conftest import free_port
warmup()
opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=32, init_method=f"tcp://127.0.0.1:{free_port()}")
rpc.init_rpc("idle", rank=0, world_size=1, rpc_backend_options=opts)
print("ready", flush=True)
sys.stdin.readline()
rpc.shutdown()
"""


def _idle_pss() -> int:
    """PSS of a process with a sampler's imports, warm kernels and an RPC agent, but no data."""
    proc = subprocess.Popen([sys.executable, "-c", IDLE], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), text=True)  # fmt: skip
    try:
        proc.stdout.readline()
        return _pss([proc.pid])
    finally:
        proc.kill()
        proc.wait(10)


def main() -> None:
    from bench.common import record

    num_nodes = int(os.environ.get("DISTGNN_BENCH_NODES", 200_000))
    base = ROOT / "outputs" / "bench" / BENCH
    base.mkdir(parents=True, exist_ok=True)
    data = _graph(num_nodes)
    print(f"graph: {data.num_nodes:,} nodes, {data.num_edges:,} edges", flush=True)
    root = base / f"parts2_{num_nodes}"
    _partition(data, root, 2)
    local = _local(data)
    del data
    workdir = base / "run"
    workdir.mkdir(exist_ok=True)
    for f in workdir.iterdir():
        f.unlink()
    dist = _distributed(root, workdir)
    record(BENCH, "local_seeds_per_s", local["seeds_s"], "seeds/s")
    record(BENCH, "local_edges_per_s", local["edges_s"], "edges/s")
    record(BENCH, "local_cpu_per_batch", local["cpu_per_batch"], "s")
    for r, res in enumerate(dist["ranks"]):
        record(
            BENCH,
            f"dist2_rank{r}_seeds_per_s",
            res["seeds_s"],
            "seeds/s",
            "local",
            res["seeds_s"] / local["seeds_s"],
        )
        record(
            BENCH,
            f"dist2_rank{r}_edges_per_s",
            res["edges_s"],
            "edges/s",
            "local",
            res["edges_s"] / local["edges_s"],
        )
        n = res["batches"]
        record(BENCH, f"dist2_rank{r}_trainer_cpu_per_batch", res["trainer_cpu_s"] / n, "s")
        record(BENCH, f"dist2_rank{r}_sampler_cpu_per_batch", res["sampler_cpu_s"] / n, "s")
        record(BENCH, f"dist2_rank{r}_wall_per_batch", res["wall_s"] / TIMED, "s")
        record(BENCH, f"dist2_rank{r}_hop_requests_per_batch", res["hop_requests"] / n, "requests")
        record(BENCH, f"dist2_rank{r}_hop_bytes_per_batch", res["hop_bytes"] / n, "bytes")
        record(BENCH, f"dist2_rank{r}_feature_rows_per_batch", res["feature_rows"] / n, "rows")
        record(BENCH, f"dist2_rank{r}_feature_bytes_per_batch", res["feature_bytes"] / n, "bytes")
    idle = _idle_pss()
    disk, pss = dist["disk_node0"], dist["pss_node0"]
    record(BENCH, "partition0_disk_bytes", disk, "bytes")
    record(BENCH, "node0_pss_bytes", pss, "bytes", "partition0_disk_bytes", pss / disk)
    record(BENCH, "idle_process_pss_bytes", idle, "bytes")
    record(
        BENCH,
        "node0_pss_minus_2_idle",
        pss - 2 * idle,
        "bytes",
        "partition0_disk_bytes",
        (pss - 2 * idle) / disk,
    )
    mapped = dist["mapped_node0"]
    record(
        BENCH, "node0_partition_mapped_pss", mapped, "bytes", "partition0_disk_bytes", mapped / disk
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.path.insert(0, str(ROOT))
        sys.exit(_child(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])))
    main()
