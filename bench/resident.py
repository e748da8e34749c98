"""What a trainer holding rows saves the data path: every row sent vs the held rows left out.

`python -m bench.resident` (DISTGNN_BENCH_NODES, default 200000): `bench.dist_sampling`'s graph
and 2-partition METIS job on 127.0.0.1 (one sampler process per trainer, both trainers at once,
fan-out [15, 10, 5], batch 1024, the default halo cache, no hot cache). Each trainer builds two
loaders of its owned nodes the way `PartitionSource._engine` does (`BatchEngine` over a
`DistNeighborSampler`, fed by its sampler process), with the same seeds and seeds of shuffle
and sampling, so their batches are the same:

* A: the sampler writes every row of the batch into the shared-memory ring (today's path);
* B: `SamplerOptions.resident_rows` = every row the trainer could hold (its partition's owned
  rows, then its node's halo-cache rows: `ResidentRows`); the sampler writes only the others,
  and the trainer fills each batch with `DeviceRows` on the CPU (on a GPU, on the device).

A warm-up pass of each (kernels compiled, caches filled, the sampler process's twins built)
compares the batches exactly: n_id, edge_index and, after B's fill, every node attribute. Then
ROUNDS rounds of one pass of TIMED batches each, A then B, then B then A (each pass one epoch
of both loaders, nothing in flight between passes; the two trainers start each pass together):
n_id and a checksum of x are compared batch by batch, outside the CPU counted. Recorded per
trainer and loader, per batch (`summarize`): the rows and bytes of x and y the sampler writes
into the ring; the sampler process's CPU and its `features` / `labels` stages
(`app.sampler.stages`; the process also serves its peer's remote hops and rows, the same in A
and B); the trainer's main-thread CPU to take a batch (its `assembly` stage included) and to
fill it; the bytes a GPU trainer would pin and copy to its device (every tensor of the batch
before the fill: what stands in for the PCIe copy) and the CPU of copying them into reused host
buffers (`HostCopy`: what stands in for `pin_memory()`); the trainer process's CPU (every
thread) and minor page faults; the share of the batch's rows held (hit rate); batches/s; and
B ÷ A. Without a GPU the fill runs on the trainer's CPU, into a fresh tensor per batch: on a
GPU it runs on the device, out of the caching allocator's reused blocks.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from app.config import SamplerConfig
from app.distributed.engine import BatchEngine, Schedule
from app.distributed.feeding import Feeding
from app.distributed.inputs import NodeInputs
from app.distributed.resident import DeviceRows, ResidentRows, holdable_attrs
from app.distributed.sampler import DistNeighborSampler, SamplerOptions
from app.loader.epochs import EpochBatching
from app.sampler import stages
from bench.dist_sampling import BATCH, FANOUT, ROOT, _runtime

BENCH = "resident"
WARMUP, TIMED, ROUNDS = 3, 12, 3
CONCURRENCY, RPC_TIMEOUT = SamplerConfig.concurrency, 120.0
CACHE_ROWS = SamplerConfig.feature_cache_size
Stores = Any  # (FeatureStoreCore, GraphStoreCore)
UNITS = {"nodes": "rows", "rows": "rows", "bytes": "bytes", "rate": "fraction",
         "share": "fraction", "batches_per_s": "batches/s", "minflt": "faults"}  # fmt: skip


@dataclass
class Pass:
    """Sums over the batches of one pass of a loader (see the module docstring)."""

    batches: int = 0
    nodes: int = 0  # rows the batches' nodes have
    ring_rows: int = 0  # rows of x the sampler wrote (the nodes whose rows were not held)
    ring_bytes: dict[str, int] = field(default_factory=dict)  # per attribute
    copy_bytes: int = 0  # every tensor of the batch before the fill
    get_cpu_s: float = 0.0  # main thread, taking each batch from the loader
    host_copy_cpu_s: float = 0.0  # main thread, `HostCopy` (the pinning copy's stand-in)
    fill_cpu_s: float = 0.0
    assembly_cpu_s: float = 0.0  # the trainer's `assembly` stage (within get_cpu_s)
    trainer_cpu_s: float = 0.0  # the process, the checks' CPU taken out
    trainer_minflt: int = 0  # the process's minor page faults
    wall_s: float = 0.0
    sampler: dict[str, float] = field(default_factory=dict)  # the sampler's counters' change

    def add(self, other: Pass) -> None:
        """Add `other`'s sums to these (passes of the same loader)."""
        for k, v in vars(other).items():
            if isinstance(v, dict):
                mine = getattr(self, k)
                for key, x in v.items():
                    mine[key] = mine.get(key, 0) + x
            else:
                setattr(self, k, getattr(self, k) + v)


def batch_bytes(batch: Any) -> int:
    """Bytes of every tensor of `batch` (a `Data`): what its copy to a device moves."""
    return sum(v.nbytes for _, v in batch if isinstance(v, Tensor))


class HostCopy:
    """What a GPU trainer's `pin_memory()` does to each batch on the host, without a GPU: copy
    every tensor into host buffers kept across batches (CUDA's pinned allocator caches its
    blocks, so in steady state the pinning is this copy; the page-locking itself is left out)."""

    def __init__(self) -> None:
        self.buffers: dict[str, Tensor] = {}

    def __call__(self, batch: Any) -> None:
        for key, t in batch:
            if not isinstance(t, Tensor):
                continue
            buf = self.buffers.get(key)
            if buf is None or buf.numel() < t.nbytes:
                buf = self.buffers[key] = torch.empty(t.nbytes, dtype=torch.uint8)
            buf[: t.nbytes].view(t.dtype).view(t.shape).copy_(t)


def _cpu(fn: Callable[..., Any], *args: Any) -> float:
    """The calling thread's CPU seconds in `fn(*args)`."""
    start = time.thread_time()
    fn(*args)
    return time.thread_time() - start


def run_pass(
    loader: BatchEngine,
    rows: DeviceRows | None,
    attrs: list[str],
    sampler_stats: Callable[[], dict[str, float]],
    seen: Callable[[int, Any], None],
    limit: int = 0,
) -> Pass:
    """One epoch of `loader` (its first `limit` batches if > 0): each batch copied as a GPU
    trainer would pin it (`HostCopy`), filled from `rows` when given, then shown to
    `seen(position, batch)` (CPU not counted)."""
    out, checks, host = Pass(ring_bytes=dict.fromkeys(attrs, 0)), 0.0, HostCopy()
    before, assembly = sampler_stats(), stages.snapshot()["assembly"]
    cpu, wall, flt = time.process_time(), time.perf_counter(), _minflt()
    batches = iter(loader)
    while not limit or out.batches < limit:
        start = time.thread_time()
        batch = next(batches, None)
        out.get_cpu_s += time.thread_time() - start
        if batch is None:
            break
        out.nodes += batch.n_id.numel()
        out.ring_rows += batch.x.size(0)
        for a in attrs:
            out.ring_bytes[a] += batch[a].nbytes
        out.copy_bytes += batch_bytes(batch)
        out.host_copy_cpu_s += _cpu(host, batch)
        if rows is not None:
            out.fill_cpu_s += _cpu(rows.fill, batch)
        checks += _cpu(seen, out.batches, batch)
        out.batches += 1
    batches.close()  # left early (limit): collects the batches still in flight
    out.wall_s = time.perf_counter() - wall
    out.trainer_cpu_s = time.process_time() - cpu - checks
    out.trainer_minflt = _minflt() - flt
    out.assembly_cpu_s = stages.snapshot()["assembly"] - assembly
    after = sampler_stats()
    out.sampler = {k: after[k] - before.get(k, 0) for k in after}
    return out


def _minflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class Pairing:
    """Asserts that the second loader's batches of a pass are the first's: n_id always, then
    `exact` (edge_index and every node attribute) or a checksum of x."""

    def __init__(self, attrs: list[str], exact: bool) -> None:
        self.attrs, self.exact = attrs, exact
        self.first: dict[int, dict[str, Any]] | None = None
        self.kept: dict[int, dict[str, Any]] = {}

    def __call__(self, position: int, batch: Any) -> None:
        mine = {"n_id": batch.n_id.clone()}
        if self.exact:
            mine.update({k: batch[k].clone() for k in ["edge_index", *self.attrs]})
        else:
            mine["x_sum"] = float(batch.x.sum(dtype=torch.float64))
        if self.first is None:
            self.kept[position] = mine
            return
        want = self.first[position]
        for key, value in mine.items():
            same = value == want[key] if isinstance(value, float) else torch.equal(value, want[key])
            if not same:
                raise AssertionError(f"batch {position}: {key} differs between the two loaders")

    def second(self) -> None:
        """The first loader's pass is over: check the next one's batches against it."""
        self.first, self.kept = self.kept, {}


def summarize(p: Pass) -> dict[str, float]:
    """Per-batch figures of a loader's passes (`Pass` sums)."""
    n, s = max(p.batches, 1), p.sampler
    cpu = s.get("cpu_s", 0.0)
    return {
        "nodes_per_batch": p.nodes / n,
        "ring_rows_per_batch": p.ring_rows / n,
        "ring_x_bytes_per_batch": p.ring_bytes.get("x", 0) / n,
        "ring_y_bytes_per_batch": p.ring_bytes.get("y", 0) / n,
        "ring_bytes_per_batch": sum(p.ring_bytes.values()) / n,
        "hit_rate": 1 - p.ring_rows / p.nodes if p.nodes else 0.0,
        "sampler_cpu_per_batch": cpu / n,
        "sampler_features_per_batch": s.get("stage_features_s", 0.0) / n,
        "sampler_features_share": s.get("stage_features_s", 0.0) / cpu if cpu else 0.0,
        "sampler_labels_per_batch": s.get("stage_labels_s", 0.0) / n,
        "trainer_get_cpu_per_batch": p.get_cpu_s / n,
        "trainer_assembly_per_batch": p.assembly_cpu_s / n,
        "trainer_fill_per_batch": p.fill_cpu_s / n,
        "trainer_get_fill_per_batch": (p.get_cpu_s + p.fill_cpu_s) / n,
        "trainer_host_copy_per_batch": p.host_copy_cpu_s / n,
        "trainer_cpu_per_batch": p.trainer_cpu_s / n,
        "trainer_minflt_per_batch": p.trainer_minflt / n,
        "copy_bytes_per_batch": p.copy_bytes / n,
        "remote_feature_bytes_per_batch": s.get("feature_bytes", 0.0) / n,
        "batches_per_s": p.batches / p.wall_s if p.wall_s else 0.0,
    }


# -- the trainer of the job ----------------------------------------------------------------------


def _engine(stores: Stores, router: Any, feeding: Feeding, cache: int, k: int) -> BatchEngine:
    """A loader of the partition's owned nodes as `PartitionSource._engine` builds one, the
    trainer holding `k` rows (0: none)."""
    options = SamplerOptions(list(FANOUT), feature_cache_size=cache, resident_rows=k)
    sampler = DistNeighborSampler(stores, options=options, router=router)
    seeds = stores[0].get_global_id(None).to(torch.int64)
    batching = EpochBatching(BATCH, shuffle=True, seed=0)
    return BatchEngine(sampler, NodeInputs(seeds), batching, feeding, schedule=Schedule(0, TIMED))


def _barrier(workdir: Path, tag: str, node: int, timeout: float = 600.0) -> None:
    """Both trainers reach `tag` before either goes on (files in the job's folder)."""
    (workdir / f"{tag}.{node}").write_text("1")
    deadline = time.monotonic() + timeout
    while not (workdir / f"{tag}.{1 - node}").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"trainer {1 - node} never reached {tag!r} ({workdir})")
        time.sleep(0.05)


def _compare(ctx: Any, stores: Stores, router: Any, workdir: Path, node: int, cache: int) -> dict:
    """The warm-up and timed passes of A and B on this trainer (see the module docstring)."""
    from app.distributed.feeding import feeding_for

    fs, gs = stores
    attrs = holdable_attrs(fs)  # what PartitionSource holds: every node attribute

    def feeding() -> Feeding:
        return feeding_for(ctx, 1, CONCURRENCY, RPC_TIMEOUT)

    a = _engine(stores, router, feeding(), cache, 0)
    stats = {"a": lambda: a.feeding.stats(a.sampler)}
    pairing = Pairing(attrs, exact=True)
    _barrier(workdir, "warm_a", node)
    run_pass(a, None, attrs, stats["a"], pairing, WARMUP)
    fs.router = fs.router or router  # the caches fill (or map) as the sampler process's did
    fs.use_cache(cache, gs, 0)
    index = ResidentRows(fs, gs, 1 << 62)  # everything it could hold
    rows = DeviceRows(index, attrs, torch.device("cpu"))
    b = _engine(stores, router, feeding(), cache, index.num_rows)
    stats["b"] = lambda: b.feeding.stats(b.sampler)
    loaders, totals = {"a": (a, None), "b": (b, rows)}, {"a": Pass(), "b": Pass()}
    pairing.second()
    _barrier(workdir, "warm_b", node)
    run_pass(b, rows, attrs, stats["b"], pairing, WARMUP)
    rates: dict[str, list[float]] = {"a": [], "b": []}
    load = [os.getloadavg()[0]]
    for r in range(ROUNDS):
        pairing = Pairing(attrs, exact=False)
        for i, v in enumerate("ab" if r % 2 == 0 else "ba"):
            _barrier(workdir, f"round{r}_{v}", node)
            loader, table = loaders[v]
            got = run_pass(loader, table, attrs, stats[v], pairing)
            totals[v].add(got)
            rates[v].append(got.batches / got.wall_s)
            if i == 0:
                pairing.second()
        load.append(os.getloadavg()[0])
    a.close()
    b.close()
    return {
        "a": asdict(totals["a"]),
        "b": asdict(totals["b"]),
        "batches_per_s": rates,
        "table_rows": index.num_rows,
        "owned_rows": index.num_owned,
        "load": load,
    }


def _trainer(node: int, root: str, workdir: str, port: int, cache: int) -> int:
    from app.distributed import workers
    from app.distributed.context import DistContext
    from app.distributed.group import join_trainer, trainer_router
    from app.distributed.server import load_stores

    ctx = DistContext.from_runtime(_runtime("trainer", node, root, workdir, port))
    stores = load_stores(root, node)
    router = trainer_router(ctx, 2)
    join_trainer(ctx, stores, router, ("127.0.0.1", port), (RPC_TIMEOUT, RPC_TIMEOUT))
    failed = True
    try:
        torch.set_num_threads(1)  # as OMP_NUM_THREADS=1: the fill's CPU on one thread
        out = _compare(ctx, stores, router, Path(workdir), node, cache)
        Path(workdir, f"trainer{node}.json").write_text(json.dumps(out))
        _barrier(Path(workdir), "done", node)  # the peer's sampler serves until both are done
        failed = False
    finally:
        workers.shutdown(ctx, 60.0, failed)
    return 0


# -- the parent: the job, then the table ---------------------------------------------------------


def _record(rank: int, res: dict) -> None:
    from bench.common import record

    a, b = (summarize(Pass(**res[v])) for v in "ab")
    for key in a:
        unit = next((u for k, u in UNITS.items() if k in key), "s")
        name = f"rank{rank}_{{}}_{key}"
        record(BENCH, name.format("a"), a[key], unit)
        ratio = b[key] / a[key] if a[key] else None
        record(BENCH, name.format("b"), b[key], unit, name.format("a"), ratio)
    record(BENCH, f"rank{rank}_resident_table_rows", res["table_rows"], "rows")
    record(BENCH, f"rank{rank}_resident_owned_rows", res["owned_rows"], "rows")
    print(f"rank {rank}: batches/s per pass {res['batches_per_s']}, load {res['load']}")


def main() -> None:
    from bench.dist_sampling import _graph, _launch, _partition, _wait_files
    from tests.helpers.ports import free_port

    num_nodes = int(os.environ.get("DISTGNN_BENCH_NODES", 200_000))
    base = ROOT / "outputs" / "bench"
    root = base / "dist_sampling" / f"parts2_{num_nodes}"  # shared with bench.dist_sampling
    data = _graph(num_nodes)
    print(f"graph: {data.num_nodes:,} nodes, {data.num_edges:,} edges", flush=True)
    _partition(data, root, 2)
    del data
    workdir = base / BENCH / "run"
    workdir.mkdir(parents=True, exist_ok=True)
    for f in workdir.iterdir():
        f.unlink()
    print(f"load before the job: {os.getloadavg()}", flush=True)
    procs = _launch(root, workdir, free_port(), CACHE_ROWS, module="bench.resident")
    try:
        _wait_files([workdir / f"trainer{n}.json" for n in (0, 1)], procs, 1800)
        for p in procs.values():
            p.wait(120)
        bad = {n: p.returncode for n, p in procs.items() if p.returncode}
        if bad:
            raise RuntimeError(f"bench.resident: exit codes {bad}; see the logs in {workdir}")
        results = [json.loads((workdir / f"trainer{n}.json").read_text()) for n in (0, 1)]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    for rank, res in enumerate(results):
        _record(rank, res)
    print(f"load after the job: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.path.insert(0, str(ROOT))
        role, node, root, work, port, cache = sys.argv[2:8]
        if role == "sampler":
            from bench.dist_sampling import _child

            sys.exit(_child(role, int(node), root, work, int(port), int(cache)))
        sys.exit(_trainer(int(node), root, work, int(port), int(cache)))
    main()
