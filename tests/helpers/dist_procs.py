"""Real processes for the distributed tests: `python tests/helpers/dist_procs.py SPEC ROLE NODE [WORKER]`.

A `Job` starts one trainer per partition (plus `num_workers` sampler processes each, running
`app.distributed.workers.serve`) on 127.0.0.1 with a free RPC port, waits for all of them with a
hard deadline, and kills every survivor in `finally`. Trainers run a named check from CHECKS
against the unpartitioned graph saved next to the partition, and exit non-zero on failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@dataclass
class Job:
    """The processes of one distributed run; use as a context manager (kills on exit)."""

    spec_path: Path
    num_parts: int
    num_workers: int
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    script: str = __file__  # what each process runs (a test module may serve its own checks)

    def __enter__(self) -> Job:
        env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
        names = [(f"trainer{p}-0", "trainer", p, -1) for p in range(self.num_parts)]
        names += [
            (f"sampler{p}-0-{w}", "sampler", p, w)
            for p in range(self.num_parts)
            for w in range(self.num_workers)
        ]
        for name, role, node, worker in names:
            log = self.spec_path.parent / f"{name}.log"
            self.logs[name] = log
            cmd = [sys.executable, self.script, str(self.spec_path), role, str(node), str(worker)]
            with open(log, "w") as out:
                self.procs[name] = subprocess.Popen(
                    cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
                )
        return self

    def wait(self, timeout: float) -> dict[str, int]:
        """Exit codes of every process; raises if any is still running after `timeout` s of
        a quiet machine (stretched by the load: `tests.helpers.load.Budget`)."""
        from tests.helpers.load import Budget

        budget = Budget(timeout)
        while budget.left() > 0 and any(p.poll() is None for p in self.procs.values()):
            time.sleep(0.1)
        for name, proc in self.procs.items():
            if proc.poll() is None:
                raise AssertionError(
                    f"{name} still running after {budget.describe()}:\n{self.tail(name)}"
                )
        return {name: proc.returncode for name, proc in self.procs.items()}

    def tail(self, name: str, lines: int = 25) -> str:
        text = self.logs[name].read_text() if self.logs[name].exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def report(self) -> str:
        return "\n".join(
            f"--- {n} (exit {p.poll()}):\n{self.tail(n)}" for n, p in self.procs.items()
        )

    def __exit__(self, *_: object) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            proc.wait(10)


def write_spec(path: Path, **spec: object) -> Path:
    path.write_text(json.dumps(spec))
    return path


# -- inside the child processes -------------------------------------------------------------------


CHECK_TIMEOUT_S = 150  # a hard bound on a whole job: the machine running CI may be heavily shared


def run_checks(
    tmp_path: Path, graph, num_parts: int, num_workers: int, check: str, **extra
) -> None:
    """Save `graph` (partitioned at `tmp_path/part`), run `check` on every trainer of a job of
    `num_parts` parts with `num_workers` samplers each, and assert each passed it."""
    import torch

    from tests.helpers.ports import free_port

    torch.save(graph, tmp_path / "graph.pt")
    spec = write_spec(
        tmp_path / "spec.json", root=str(tmp_path / "part"), graph=str(tmp_path / "graph.pt"),
        num_parts=num_parts, num_workers=num_workers, port=free_port(), dir=str(tmp_path),
        timeout=20.0, batch_size=64, check=check, **extra,
    )  # fmt: skip
    with Job(spec, num_parts, num_workers) as job:
        codes = job.wait(CHECK_TIMEOUT_S)
        assert all(c == 0 for c in codes.values()), job.report()
        for p in range(num_parts):
            assert "CHECKS OK" in job.tail(f"trainer{p}-0"), job.report()


def _runtime(spec: dict, role: str, node: int, worker: int):
    from app.runtime import Runtime

    return Runtime(
        role=role, node_rank=node, num_nodes=spec["num_parts"], local_rank=0, procs_per_node=1,
        worker_index=worker, num_workers=spec["num_workers"], master_addr="127.0.0.1", ddp_port=0,
        rpc_port=spec["port"], job_dir=spec["dir"], config_path="", partition_root=spec["root"],
    )  # fmt: skip


def main() -> int:
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    spec_path, role, node, worker = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    spec = json.loads(Path(spec_path).read_text())
    runtime = _runtime(spec, role, node, worker)
    if role == "sampler":
        from app.config import Config
        from app.distributed.workers import serve

        cfg = Config()
        cfg.sampler.rpc_timeout_s = spec["timeout"]
        cfg.cluster.init_timeout_s = 60.0
        return serve(runtime, cfg)
    try:
        return CHECKS[spec["check"]](runtime, spec)
    except Exception:
        traceback.print_exc()
        return 1


# -- trainer checks (run inside trainer processes) ------------------------------------------------


def _loader_kwargs(rt, spec: dict, ctx) -> dict:
    return dict(
        current_ctx=ctx, num_workers=rt.num_workers, master_port=rt.rpc_port,
        rpc_timeout=spec["timeout"], concurrency=spec.get("concurrency", 2), seed=5,
        batch_size=spec["batch_size"],
        **({"feature_cache_size": spec["cache"]} if "cache" in spec else {}),
        **({"hot_cache_bytes": spec["hot"]} if "hot" in spec else {}),
    )  # fmt: skip


def _check_exact(b, ref, perm) -> None:
    """A distributed batch equals the single-machine sample with the same seed, id for id."""
    import torch

    node, rl, cl, epos, nsn, nse, batch = ref
    assert torch.equal(b.n_id, torch.from_numpy(node)), "sampled nodes differ from local sampling"
    assert torch.equal(b.edge_index[0], torch.from_numpy(rl)), "edge sources differ"
    assert torch.equal(b.edge_index[1], torch.from_numpy(cl)), "edge targets differ"
    assert torch.equal(b.e_id, torch.from_numpy(perm[epos])), "edge ids differ"
    assert b.num_sampled_nodes == list(nsn) and b.num_sampled_edges == list(nse)
    if batch is not None:
        assert torch.equal(b.batch, torch.from_numpy(batch)), "disjoint tree ids differ"


def _check_valid(b, g, fanouts) -> None:
    """Every edge exists, fan-outs hold, features and labels equal the originals."""
    import torch

    ei = g["edge_index"]
    src, dst = b.n_id[b.edge_index[0]], b.n_id[b.edge_index[1]]
    assert torch.equal(ei[0, b.e_id], src) and torch.equal(ei[1, b.e_id], dst), "edge not in graph"
    assert torch.equal(b.x, g["x"][b.n_id]) and torch.equal(b.y, g["y"][b.n_id]), "wrong features"
    start = 0
    for hop, k in enumerate(fanouts):
        n_front = b.num_sampled_nodes[hop]
        cols = b.edge_index[1, start : start + b.num_sampled_edges[hop]]
        start += b.num_sampled_edges[hop]
        if k >= 0 and cols.numel():
            assert int(torch.bincount(cols).max()) <= k, f"fan-out {k} exceeded at hop {hop}"
        assert n_front >= 0


def check_homo(rt, spec: dict) -> int:
    """Node loaders (full and finite fan-out, 2 epochs, shuffled) and link loaders."""
    import torch

    from app.distributed import DistContext, DistNeighborLoader, shutdown
    from app.sampler.csc import to_csc
    from app.sampler.kernel import derive_seed, neighbor_sample

    g = torch.load(spec["graph"])
    colptr, row, perm = to_csc(g["edge_index"], g["x"].size(0))
    ctx = DistContext.from_runtime(rt)
    kw = _loader_kwargs(rt, spec, ctx)
    failed, batches = True, 0
    try:
        for fan, disjoint, epochs in [([-1, -1], False, 1), ([3, 2], False, 2), ([2, 2], True, 1)]:
            loader = DistNeighborLoader(spec["root"], fan, shuffle=True, disjoint=disjoint, **kw)
            for epoch in range(epochs):
                for i, b in enumerate(loader):
                    seeds = b.n_id[: b.batch_size].numpy()
                    ref = neighbor_sample(
                        colptr, row, seeds, fan, False, derive_seed(5, epoch, i), disjoint
                    )
                    _check_exact(b, ref, perm)
                    if not disjoint:
                        _check_valid(b, g, fan)
                    batches += 1
        _check_data_path(loader, spec)
        _check_link(spec, kw, g)
        failed = False
    finally:
        shutdown(ctx, 60.0, failed)
    print(f"CHECKS OK {batches} batches", flush=True)
    return 0


def _check_data_path(loader, spec: dict) -> None:
    """The halo cache served remote rows iff it is on; the shared-memory ring stayed small."""
    stats = loader.data_stats()
    if spec.get("cache", 1):
        assert stats["cache_hits"] > 0 and stats["cache_rows"] > 0, stats
    else:
        assert stats["cache_hits"] == 0 and stats["feature_rows"] > 0, stats
    from app.distributed.feeding import SamplerProcesses

    feeding = loader.feeding
    if isinstance(feeding, SamplerProcesses):  # in flight + the batch in hand + the loop var's
        assert 0 < feeding.ring.depth <= feeding.concurrency + 2, feeding.ring.depth


def _check_link(spec: dict, kw: dict, g: dict) -> None:
    import torch

    from app.distributed import DistLinkNeighborLoader

    ei = g["edge_index"]
    sel = ei[:, :64]
    for mode, ratio in (("binary", 1.0), ("triplet", 2)):
        loader = DistLinkNeighborLoader(spec["root"], [2, 2], edge_label_index=sel, neg_sampling=mode,
                                        neg_sampling_ratio=ratio, shuffle=True, **kw)  # fmt: skip
        for b in loader:
            pos = ei[:, b.input_id]
            if mode == "binary":
                n = b.input_id.numel()
                eli = b.n_id[b.edge_label_index]
                assert torch.equal(eli[:, :n], pos), "positive pairs are not the batch's edges"
                assert b.edge_label[:n].eq(1).all() and b.edge_label[n:].eq(0).all()
                assert eli.size(1) == 2 * n, "binary ratio 1.0: one negative per positive"
            else:
                assert torch.equal(b.n_id[b.src_index], pos[0]) and torch.equal(
                    b.n_id[b.dst_pos_index], pos[1]
                )
                assert b.dst_neg_index.shape == (b.input_id.numel(), 2)
                assert bool((b.n_id[b.dst_neg_index] < g["x"].size(0)).all())
            assert torch.equal(b.x, g["x"][b.n_id])


def check_hetero(rt, spec: dict) -> int:
    """Full fan-out hetero sampling equals a BFS over the unpartitioned graph, per type."""
    import torch

    from app.distributed import DistContext, DistNeighborLoader, shutdown

    g = torch.load(spec["graph"])
    ctx = DistContext.from_runtime(rt)
    kw = _loader_kwargs(rt, spec, ctx)
    failed = True
    try:
        full = DistNeighborLoader(spec["root"], [-1, -1], input_nodes=("paper", None), **kw)
        for b in full:
            _check_hetero_full(b, g)
        fan = {tuple(et): [2, 1] for et in g["edge_index"]}
        for b in DistNeighborLoader(spec["root"], fan, input_nodes=("paper", None), **kw):
            _check_hetero_valid(b, g, fan)
        failed = False
    finally:
        shutdown(ctx, 60.0, failed)
    print("CHECKS OK", flush=True)
    return 0


def _in_edges(ei, dst_ids):
    import torch

    mask = torch.isin(ei[1], dst_ids)
    eids = torch.nonzero(mask).view(-1)
    return {
        (int(s), int(d), int(e)) for s, d, e in zip(ei[0, eids], ei[1, eids], eids, strict=False)
    }


def _check_hetero_full(b, g) -> None:
    import torch

    ets = list(g["edge_index"])
    seeds = b["paper"].n_id[: b["paper"].batch_size]
    front = {t: torch.empty(0, dtype=torch.int64) for t in g["num_nodes"]}
    front["paper"] = seeds
    seen = {t: set(front[t].tolist()) for t in front}
    edges = {et: set() for et in ets}
    for _hop in range(2):
        new = {t: [] for t in front}
        for et in ets:
            got = _in_edges(g["edge_index"][et], front[et[2]])
            edges[et] |= got
            for s, _, _ in sorted(got, key=lambda e: e[2]):
                if s not in seen[et[0]]:
                    seen[et[0]].add(s)
                    new[et[0]].append(s)
        front = {t: torch.tensor(v, dtype=torch.int64) for t, v in new.items()}
    for t in g["num_nodes"]:
        assert set(b[t].n_id.tolist()) == seen[t], f"{t}: sampled node set differs from the BFS"
        assert b[t].n_id.numel() == len(seen[t]), f"{t}: duplicated nodes"
    for et in ets:
        s = b[et]
        got = set(
            zip(
                b[et[0]].n_id[s.edge_index[0]].tolist(),
                b[et[2]].n_id[s.edge_index[1]].tolist(),
                s.e_id.tolist(),
                strict=False,
            )
        )
        assert got == edges[et], f"{et}: sampled edges differ from the BFS"
    assert torch.equal(b["paper"].x, g["x"]["paper"][b["paper"].n_id])
    assert torch.equal(b["paper"].y, g["y"]["paper"][b["paper"].n_id])


def _check_hetero_valid(b, g, fan) -> None:
    import torch

    for et, ks in fan.items():
        s = b[et]
        ei = g["edge_index"][et]
        src, dst = b[et[0]].n_id[s.edge_index[0]], b[et[2]].n_id[s.edge_index[1]]
        assert torch.equal(ei[0, s.e_id], src) and torch.equal(ei[1, s.e_id], dst), (
            f"{et}: edge not in graph"
        )
        if s.edge_index.size(1):
            assert int(torch.bincount(s.edge_index[1]).max()) <= max(ks), f"{et}: fan-out exceeded"
    assert torch.equal(b["paper"].x, g["x"]["paper"][b["paper"].n_id])


def check_fault(rt, spec: dict) -> int:
    """Sample until a peer dies; record the error (exit 3), or exit 4 if none came."""
    from app.distributed import DistContext, DistNeighborLoader, PeerError, shutdown

    ctx = DistContext.from_runtime(rt)
    kw = _loader_kwargs(rt, spec, ctx)
    out = Path(spec["dir"])
    failed = True
    try:
        loader = DistNeighborLoader(spec["root"], [-1, -1], shuffle=True, **kw)
        deadline = time.monotonic() + 60
        seen = 0
        while time.monotonic() < deadline:
            try:
                for _ in loader:
                    seen += 1
                    if seen == 3:
                        (out / f"ready_{rt.name}").write_text("1")
                    time.sleep(0.05)
            except PeerError as err:
                (out / f"error_{rt.name}.json").write_text(
                    json.dumps({"error": str(err), "t": time.time()})
                )
                print(f"PeerError: {err}", flush=True)
                return 3
        failed = False
        return 4
    finally:
        shutdown(ctx, 10.0, failed)


def check_cache(rt, spec: dict) -> int:
    """The halo cache of the hottest remote nodes holds exactly the rows a remote fetch of the
    same ids returns (and the originals), ids as int32 and float16 in transit alike."""
    import torch

    from app.distributed import DistContext, DistNeighborLoader, shutdown

    g = torch.load(spec["graph"])
    ctx = DistContext.from_runtime(rt)
    failed = True
    try:
        loader = DistNeighborLoader(spec["root"], [2, 2], **_loader_kwargs(rt, spec, ctx))
        sampler = loader.dist_sampler
        sampler.prepare(1)  # fills the cache (one batched fetch from the owners)
        fs = sampler.feature_store
        ids = torch.from_numpy(fs.cache.ids[None])
        assert 0 < ids.numel() <= spec["cache"], ids.numel()
        assert (fs.owner(ids.numpy()) != fs.partition_idx).all(), "cached an owned node"
        assert fs.id_wire.node_dtype == torch.int32  # a small graph: int32 ids on the wire
        fetched = fs.fetch(ids, None, ["x", "y"], cache=False)
        for attr in ("x", "y"):
            cached = torch.from_numpy(fs.cache.rows(None, attr))
            assert torch.equal(cached, fetched[attr]) and torch.equal(cached, g[attr][ids]), attr
        narrow = fs.fetch(ids, None, ["x"], cache=False, wire_dtype="float16")["x"]
        assert narrow.dtype == torch.float32  # widened back to the store's dtype
        assert torch.equal(narrow, g["x"][ids].half().float())
        if spec.get("hot"):
            _check_hot(fs, g, spec["hot"])
            _check_resident(sampler, g)
        failed = False
    finally:
        shutdown(ctx, 60.0, failed)
    print("CHECKS OK cache", flush=True)
    return 0


def _check_resident(sampler, g: dict) -> None:
    """A GPU trainer's resident rows (`app.distributed.resident`): its partition, then the
    halo cache's rows, then the hot cache's, with their original rows; a batch sampled to
    leave them out carries exactly the other rows and, filled, equals the batch that carries
    every row."""
    import dataclasses

    import numpy as np
    import torch

    from app.distributed.resident import DeviceRows, ResidentRows
    from app.distributed.sampler import DistNeighborSampler
    from app.loader.batch import assemble

    fs, gs = sampler.feature_store, sampler.graph_store
    n = g["x"].shape[0]
    index = ResidentRows(fs, gs, 1 << 62)
    halo, hot = fs.cache.ids[None], fs.hot.ids[None]
    owned = fs.num_rows(None)
    assert index.num_rows == owned + halo.size + hot.size, (index.num_rows, owned)
    slots = index.slots(np.arange(n))
    assert np.array_equal(slots[halo], owned + np.arange(halo.size))
    assert np.array_equal(slots[hot], owned + halo.size + np.arange(hot.size))
    held = np.flatnonzero(slots >= 0)
    assert held.size == index.num_rows
    rows = DeviceRows(index, ["x", "y"], torch.device("cpu"))
    for attr in ("x", "y"):
        assert torch.equal(rows.tables[attr][slots[held]], g[attr][held]), attr
    options = dataclasses.replace(sampler.options, resident_rows=index.num_rows)
    resident = DistNeighborSampler((fs, gs), options=options, router=sampler.router)
    seeds = torch.from_numpy(np.flatnonzero(fs.owner(np.arange(n)) == fs.partition_idx)[:64])
    for seed in range(3):
        want = assemble(sampler.sample_batch(seeds, torch.arange(seeds.numel()), seed=seed))
        got = assemble(resident.sample_batch(seeds, torch.arange(seeds.numel()), seed=seed))
        assert torch.equal(want.n_id, got.n_id)
        assert torch.equal(got.x, g["x"][got.n_id[slots[got.n_id] < 0]]), "carried other rows"
        rows.fill(got)
        for attr in ("x", "y"):
            assert torch.equal(got[attr], want[attr]), attr


def _check_hot(fs, g: dict, budget: int) -> None:
    """The hot cache holds remote nodes the halo cache does not, the highest in-degree ones
    that fit `budget` bytes, with the rows a remote fetch returns; a fetch through both caches
    returns the original rows."""
    import numpy as np
    import torch

    hot = torch.from_numpy(fs.hot.ids[None])
    n = g["x"].shape[0]
    remote = np.flatnonzero(fs.owner(np.arange(n)) != fs.partition_idx)
    assert 0 < hot.numel() and hot.numel() * fs.row_nbytes(None) <= budget, hot.numel()
    assert np.isin(hot.numpy(), remote).all(), "cached an owned node"
    assert not np.isin(hot.numpy(), fs.cache.ids[None]).any(), "holds a halo-cached node"
    degree = torch.bincount(g["edge_index"][1], minlength=n).numpy()
    rest = np.setdiff1d(remote, np.concatenate([hot.numpy(), fs.cache.ids[None]]))
    assert degree[hot.numpy()].min() >= degree[rest].max(), "not the highest-degree nodes"
    fetched = fs.fetch(hot, None, ["x", "y"], cache=False)
    for attr in ("x", "y"):
        cached = torch.from_numpy(fs.hot.rows(None, attr))
        assert torch.equal(cached, fetched[attr]) and torch.equal(cached, g[attr][hot]), attr
    before = fs.hot_hits
    everything = torch.arange(n)
    assert torch.equal(fs.fetch(everything, None, ["x"])["x"], g["x"]), "cached rows differ"
    assert fs.hot_hits - before == hot.numel(), (fs.hot_hits, before)


CHECKS = {
    "check_homo": check_homo,
    "check_hetero": check_hetero,
    "check_fault": check_fault,
    "check_cache": check_cache,
}


if __name__ == "__main__":
    sys.exit(main())
