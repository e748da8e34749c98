"""Distributed vs local neighbour sampling on one ≥200k-node / ≥4M-edge graph, side by side.

`python -m bench.dist_sampling` (set DISTGNN_BENCH_NODES to change the graph size):

* local: `app.loader.NeighborLoader` on the whole graph in this process (1 partition);
* distributed: a 2-partition METIS job on 127.0.0.1 — 2 trainers running AT ONCE, each with one
  sampler process (`app.distributed.workers.serve`), `DistNeighborLoader(num_workers=1)`;

both with fan-out [15, 10, 5], batch 1024, features + labels gathered. The distributed job runs
twice, with the halo feature cache off and at its default size. Recorded per trainer, over the
timed batches (after the warm-up, which compiles kernels and fills the cache): seeds/s and
sampled edges/s (ratio to local), sampler CPU-seconds per batch (ratio to the local loader's),
minor page faults per batch of sampler and trainer, remote hop requests / bytes and remote
feature rows / bytes per batch (with the cache: ratio to without, and its hit rate), the
shared-memory ring's depth; where each batch's CPU goes, per stage (`app.sampler.stages`: kernel,
relabel, route, features, labels, assembly, handoff, other; of the local loader and of each
sampler process); graph.pt bytes per edge of part 0 (ratio to the same tensors with
int64 integers, the layout before compact storage); and the summed PSS of one node's
processes vs the partition's on-disk bytes (plus the PSS of an idle process with the same
imports = fixed overhead).

`DISTGNN_BENCH_PROFILE=FOLDER` also writes each sampler process's cProfile of the endpoint calls
it served (`sampler<node>_<cache rows>.prof`; read with `python -m pstats`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from app.config import SamplerConfig

ROOT = Path(__file__).resolve().parents[1]
BENCH = "dist_sampling"
FANOUT = [15, 10, 5]
BATCH = 1024
WARMUP, TIMED = 2, 12
CACHE_ROWS = SamplerConfig.feature_cache_size  # the default halo cache (also run with 0: off)


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


def _time_batches(loader, after_warmup=None) -> tuple[float, int, int]:
    """(seconds, seeds, sampled edges) over TIMED batches after WARMUP (then `after_warmup()`)."""
    it = _batches(loader)
    for _ in range(WARMUP):
        next(it)
    if after_warmup is not None:
        after_warmup()
    seeds = edges = 0
    start = time.perf_counter()
    for _ in range(TIMED):
        b = next(it)
        seeds += b.batch_size
        edges += b.edge_index.size(1)
    return time.perf_counter() - start, seeds, edges


def _local(data) -> dict:
    import torch

    from app.loader.node_loader import NeighborLoader
    from app.sampler import stages

    torch.set_num_threads(1)  # as a sampler runs; the stages then count every thread's CPU
    loader = NeighborLoader(data, FANOUT, input_nodes=None, batch_size=BATCH, shuffle=True)
    start: dict = {}

    def _start() -> None:
        start.update(cpu=time.process_time(), stages=stages.snapshot())

    secs, seeds, edges = _time_batches(loader, _start)
    cpu = time.process_time() - start["cpu"]
    split = _stage_split(start["stages"], stages.snapshot())
    return {"seeds_s": seeds / secs, "edges_s": edges / secs, "cpu_per_batch": cpu / TIMED,
            "stages": split}  # fmt: skip


def _stage_split(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per stage between two `app.sampler.stages` snapshots (or stats records)."""
    return {name: after[name] - before[name] for name in after}


def _record_stages(name: str, split: dict[str, float], cpu: float, batches: int) -> None:
    """Per-batch CPU of each stage (ratio: its share of the process's CPU) and of the rest."""
    from bench.common import record

    for stage, secs in [*split.items(), ("other", cpu - sum(split.values()))]:
        record(BENCH, f"{name}_stage_{stage}_per_batch", secs / batches, "s",
               f"{name}_cpu_per_batch", secs / cpu)  # fmt: skip


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


def _graph_bytes(root: Path, part: int) -> tuple[int, int, int]:
    """(bytes of part `part`'s graph.pt, its edges, the bytes the same tensors take with every
    integer stored as int64, the layout before compact storage): what topology costs per edge."""
    import torch

    path = root / f"part_{part}" / "graph.pt"
    g = torch.load(path, weights_only=True, mmap=True)
    tensors = [t for t in g.values() if isinstance(t, torch.Tensor)]
    wide = sum(t.numel() * (8 if not t.is_floating_point() else t.element_size()) for t in tensors)
    return path.stat().st_size, int(g["row"].numel()), wide


def _launch(
    root: Path, workdir: Path, port: int, cache: int, module: str = "bench.dist_sampling"
) -> dict[str, subprocess.Popen]:
    """Both nodes' sampler process and trainer: `python -m <module> --child role node ...`."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    procs = {}
    for role, node in [("sampler", 0), ("sampler", 1), ("trainer", 0), ("trainer", 1)]:
        name = f"{role}{node}"
        cmd = [
            sys.executable,
            "-m",
            module,
            "--child",
            role,
            str(node),
            str(root),
            str(workdir),
            str(port),
            str(cache),
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


def _distributed(root: Path, workdir: Path, cache: int) -> dict:
    from tests.helpers.ports import free_port

    workdir.mkdir(exist_ok=True)
    for f in workdir.iterdir():
        f.unlink()
    procs = _launch(root, workdir, free_port(), cache)
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
        "graph_node0": _graph_bytes(root, 0),
    }


def _record_rank(name: str, res: dict, local: dict) -> None:
    from bench.common import record

    n = res["batches"]
    for key, unit in (("seeds_s", "seeds/s"), ("edges_s", "edges/s")):
        record(
            BENCH,
            f"{name}_{key.replace('_s', '_per_s')}",
            res[key],
            unit,
            f"local_{key.replace('_s', '_per_s')}",
            res[key] / local[key],
        )
    record(
        BENCH,
        f"{name}_sampler_cpu_per_batch",
        res["sampler_cpu_s"] / n,
        "s",
        "local_cpu_per_batch",
        res["sampler_cpu_s"] / n / local["cpu_per_batch"],
    )
    _record_stages(f"{name}_sampler", res["sampler_stages"], res["sampler_cpu_s"], n)
    record(BENCH, f"{name}_trainer_cpu_per_batch", res["trainer_cpu_s"] / n, "s")
    record(BENCH, f"{name}_wall_per_batch", res["wall_s"] / n, "s")
    record(BENCH, f"{name}_sampler_minflt_per_batch", res["sampler_minflt"] / n, "faults")
    record(BENCH, f"{name}_trainer_minflt_per_batch", res["trainer_minflt"] / n, "faults")
    record(BENCH, f"{name}_hop_requests_per_batch", res["hop_requests"] / n, "requests")
    record(BENCH, f"{name}_hop_bytes_per_batch", res["hop_bytes"] / n, "bytes")
    record(BENCH, f"{name}_feature_rows_per_batch", res["feature_rows"] / n, "rows")
    record(BENCH, f"{name}_feature_bytes_per_batch", res["feature_bytes"] / n, "bytes")  # fmt: skip


def _runtime(role: str, node: int, root: str, workdir: str, port: int):
    from app.runtime import Runtime

    return Runtime(role=role, node_rank=node, num_nodes=2, local_rank=0, procs_per_node=1,
                   worker_index=0 if role == "sampler" else -1, num_workers=1,
                   master_addr="127.0.0.1", ddp_port=0, rpc_port=port, job_dir=workdir,
                   config_path="", partition_root=root)  # fmt: skip


def _stats(worker: str) -> dict:
    from app.distributed import rpc

    return rpc.call_async(worker, "stats").wait()


def _sampler_stages(before: dict, after: dict) -> dict[str, float]:
    """The sampler process's CPU seconds per stage between two `stats` answers."""
    keys = [k for k in after if k.startswith("stage_")]
    split = _stage_split({k: before[k] for k in keys}, {k: after[k] for k in keys})
    return {k.removeprefix("stage_").removesuffix("_s"): v for k, v in split.items()}


def _minflt() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _profile_endpoints(out: Path) -> None:
    """cProfile (in thread CPU time) every endpoint call this process serves (RPC threads: one
    profile per call, merged) and write the merged stats to `out` at exit (`DISTGNN_BENCH_PROFILE=folder`)."""
    import atexit
    import cProfile
    import pstats
    import threading

    from app.distributed import endpoints

    done, lock = [], threading.Lock()

    def wrap(fn):
        def run(*args):
            prof = cProfile.Profile(time.thread_time)  # CPU seconds of this thread, not wall
            prof.enable()
            try:
                return fn(*args)
            finally:
                prof.disable()
                with lock:
                    done.append(prof)

        return run

    def dump() -> None:
        if done:
            stats = pstats.Stats(done[0])
            for prof in done[1:]:
                stats.add(prof)
            stats.dump_stats(out)

    endpoints._table.update({name: wrap(fn) for name, fn in endpoints._table.items()})
    atexit.register(dump)


def _child(role: str, node: int, root: str, workdir: str, port: int, cache: int) -> int:
    from app.config import Config
    from app.distributed import DistContext, DistNeighborLoader, workers

    rt = _runtime(role, node, root, workdir, port)
    if role == "sampler":
        if os.environ.get("DISTGNN_BENCH_PROFILE"):
            _profile_endpoints(
                Path(os.environ["DISTGNN_BENCH_PROFILE"], f"sampler{node}_{cache}.prof")
            )
        return workers.serve(rt, Config())
    ctx = DistContext.from_runtime(rt)
    failed = True
    try:
        loader = DistNeighborLoader(root, FANOUT, batch_size=BATCH, shuffle=True, current_ctx=ctx,
                                    num_workers=1, concurrency=2, master_port=port, rpc_timeout=120.0,
                                    feature_cache_size=cache)  # fmt: skip
        worker, start = loader.feeding.workers[0], {}

        def _start() -> None:  # after the warm-up batches (kernel compile, cache fill)
            start.update(cpu=time.process_time(), flt=_minflt(), sampler=_stats(worker))
            loader.data_stats()

        secs, seeds, edges = _time_batches(loader, _start)
        end, stats = _stats(worker), loader.data_stats()
        out = {"seeds_s": seeds / secs, "edges_s": edges / secs, "worker": worker,
               "batches": TIMED, "trainer_cpu_s": time.process_time() - start["cpu"],
               "trainer_minflt": _minflt() - start["flt"], "wall_s": secs,
               "sampler_cpu_s": end["cpu_s"] - start["sampler"]["cpu_s"],
               "sampler_minflt": end["minflt"] - start["sampler"]["minflt"],
               "sampler_stages": _sampler_stages(start["sampler"], end),
               "ring_depth": loader.feeding.ring.depth, **stats}  # fmt: skip
        Path(workdir, f"trainer{node}.json").write_text(json.dumps(out))
        deadline = time.monotonic() + 120
        while not Path(workdir, "measured").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        failed = False
    finally:
        workers.shutdown(ctx, 60.0, failed)
    return 0


IDLE = """
import sys, time
from torch.distributed import rpc
import app.distributed.workers
from app.sampler.kernel import warmup
from tests.helpers.ports import free_port
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
    nocache = _distributed(root, base / "run_nocache", 0)
    dist = _distributed(root, base / "run", CACHE_ROWS)
    record(BENCH, "local_seeds_per_s", local["seeds_s"], "seeds/s")
    record(BENCH, "local_edges_per_s", local["edges_s"], "edges/s")
    record(BENCH, "local_cpu_per_batch", local["cpu_per_batch"], "s")
    _record_stages("local", local["stages"], local["cpu_per_batch"] * TIMED, TIMED)
    for r, (res, off) in enumerate(zip(dist["ranks"], nocache["ranks"], strict=True)):
        _record_rank(f"dist2_rank{r}", res, local)
        _record_rank(f"dist2_nocache_rank{r}", off, local)
        n, m = res["batches"], off["batches"]
        record(BENCH, f"dist2_rank{r}_cache_hit_rate", res["cache_hit_rate"], "fraction")
        record(BENCH, f"dist2_rank{r}_cache_rows", res["cache_rows"], "rows")
        record(BENCH, f"dist2_rank{r}_ring_depth", res["ring_depth"], "slots")
        record(BENCH, f"dist2_rank{r}_remote_feature_bytes_vs_nocache", res["feature_bytes"] / n,
               "bytes", f"dist2_nocache_rank{r}_feature_bytes_per_batch",
               (res["feature_bytes"] / n) / max(off["feature_bytes"] / m, 1))  # fmt: skip
    size, edges, wide = dist["graph_node0"]
    record(BENCH, "partition0_int64_graph_bytes_per_edge", wide / edges, "bytes/edge")
    record(BENCH, "partition0_graph_bytes_per_edge", size / edges, "bytes/edge",
           "partition0_int64_graph_bytes_per_edge", size / wide)  # fmt: skip
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
        args = sys.argv[2:]
        sys.exit(_child(args[0], int(args[1]), args[2], args[3], int(args[4]), int(args[5])))
    main()
