"""Local sampler and loader throughput on a 200k-node / 4M-edge power-law graph, one thread.

Measures (fan-out [15, 10, 5], batch 1024, warm kernels): sampled edges/s and seeds/s of the
fused kernel through `NeighborSampler`, loader seeds/s (sample + gather 100 float32 features +
Data build), and feature-gather GB/s. When `pyg_lib` is importable, the same seeds go through
`torch.ops.pyg.neighbor_sample` in the same run and the ratio is recorded.

Rates come in two clocks: wall time (`*_per_s`) and this process's CPU time (`*_per_cpu_s`).
Everything runs on one thread, so CPU time is what a dedicated core would take; on a shared
machine the wall-clock figure also counts the time other tenants held the core.

Run: `python -m bench.sampler`.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.sampler import NodeSamplerInput

from app.loader import NeighborLoader
from app.sampler.neighbor import NeighborSampler
from bench.common import record

BENCH = "sampler"
NUM_NODES, NUM_EDGES, NUM_FEATURES = 200_000, 4_000_000, 100
FANOUT, BATCH, NUM_BATCHES = [15, 10, 5], 1024, 30


def power_law_graph(num_nodes: int, num_edges: int, seed: int = 0) -> Data:
    """Both endpoints drawn ∝ rank^-0.8 (over shuffled ids): skewed in- and out-degrees."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(np.arange(1, num_nodes + 1, dtype=np.float64) ** -0.8)
    cdf /= cdf[-1]
    ends = [rng.permutation(num_nodes)[np.searchsorted(cdf, rng.random(num_edges))] for _ in "sd"]
    x = torch.from_numpy(rng.standard_normal((num_nodes, NUM_FEATURES), dtype=np.float32))
    y = torch.from_numpy(rng.integers(0, 47, num_nodes))
    return Data(x=x, y=y, edge_index=torch.from_numpy(np.stack(ends)), num_nodes=num_nodes)


def seed_batches(num: int, seed: int = 1) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, NUM_NODES, (BATCH,), generator=gen) for _ in range(num)]


class Clocks:
    """Wall and process-CPU seconds of a `with` block."""

    def __enter__(self) -> Clocks:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu

    def rates(self, metric: str, amount: float, unit: str) -> tuple[float, float]:
        """Record `amount` per wall second and per CPU second; return both."""
        wall = record(BENCH, f"{metric}_per_s", amount / self.wall, f"{unit}/s")["value"]
        cpu = record(BENCH, f"{metric}_per_cpu_s", amount / self.cpu, f"{unit}/cpu-s")["value"]
        return wall, cpu


def bench_sampler(sampler: NeighborSampler, batches: list[torch.Tensor]) -> tuple[float, float]:
    """Sampled edges/s (wall, CPU) over `batches` (after two warm-up batches)."""
    for seeds in batches[:2]:
        sampler.sample_from_nodes(NodeSamplerInput(None, seeds))
    edges = 0
    with Clocks() as clocks:
        for seeds in batches:
            edges += sampler.sample_from_nodes(NodeSamplerInput(None, seeds)).row.numel()
    clocks.rates("sampler_seeds", len(batches) * BATCH, "seeds")
    return clocks.rates("sampler_edges", edges, "edges")


def bench_pyg_lib(sampler: NeighborSampler, batches, ours: tuple[float, float]) -> None:
    try:
        import pyg_lib  # noqa: F401
    except ImportError:
        print(f"{BENCH:<22} pyg_lib not importable: no side-by-side reference this run")
        return
    colptr, row = torch.from_numpy(sampler.colptr), torch.from_numpy(sampler.row)
    edges = 0
    with Clocks() as clocks:
        for seeds in batches:
            out = torch.ops.pyg.neighbor_sample(
                colptr, row, seeds, FANOUT, csc=True, replace=False, directed=True,
                disjoint=False, temporal_strategy="uniform", return_edge_id=True,
            )  # fmt: skip
            edges += out[0].numel()
    refs = clocks.rates("pyg_lib_edges", edges, "edges")
    for clock, mine, ref in zip(("wall", "cpu"), ours, refs, strict=True):
        ratio = mine / ref
        record(BENCH, f"edges_vs_pyg_lib_{clock}", ratio, "x", "pyg_lib.neighbor_sample", ratio)


def bench_loader(data: Data, sampler: NeighborSampler) -> None:
    loader = NeighborLoader(data, FANOUT, batch_size=BATCH, shuffle=True, sampler=sampler)
    it = iter(loader)
    next(it)
    seeds = 0
    with Clocks() as clocks:
        for _ in range(NUM_BATCHES):
            seeds += next(it).batch_size
    clocks.rates("loader_seeds", seeds, "seeds")


def bench_gather(data: Data, sampler: NeighborSampler, batches) -> None:
    ids = [sampler.sample_from_nodes(NodeSamplerInput(None, s)).node for s in batches[:10]]
    data.x.index_select(0, ids[0])
    with Clocks() as clocks:
        nbytes = sum(data.x.index_select(0, n).numel() * 4 for n in ids)
    clocks.rates("feature_gather_GB", nbytes / 1e9, "GB")


def main() -> None:
    torch.set_num_threads(1)
    start = time.perf_counter()
    data = power_law_graph(NUM_NODES, NUM_EDGES)
    secs = time.perf_counter() - start
    print(f"{BENCH:<22} graph: {NUM_NODES} nodes, {NUM_EDGES} edges ({secs:.1f}s)")
    start = time.perf_counter()
    sampler = NeighborSampler(data, FANOUT, seed=0)
    record(BENCH, "sampler_build_s", time.perf_counter() - start, "s")
    batches = seed_batches(NUM_BATCHES)
    ours = bench_sampler(sampler, batches)
    bench_pyg_lib(sampler, batches, ours)
    bench_loader(data, sampler)
    bench_gather(data, sampler, batches)


if __name__ == "__main__":
    main()
