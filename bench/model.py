"""Model step time: PyG's GraphSAGE (plain, then with its trim-to-layer) vs ours, side by side.

One training step (forward + backward + Adam) of a 3-layer GraphSAGE, hidden 256, dropout 0.5,
on realistic sampled batches: a power-law graph of 200k nodes / 4M edges with 100 features,
1024 seeds sampled [15, 10, 5] by `app.loader.NeighborLoader`. The variants run interleaved on
the same batches (the machine is shared, so each gets the same noise); the median step is kept.

    python -m bench.model
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data

from bench.common import record

BENCH = "model"
NUM_NODES, NUM_EDGES, FEATURES, CLASSES = 200_000, 4_000_000, 100, 47
FANOUTS, BATCH, HIDDEN, LAYERS, DROPOUT = [15, 10, 5], 1024, 256, 3, 0.5


def power_law_graph(seed: int = 0) -> Data:
    """Sources drawn with Zipf-like weights (hubs), destinations milder: skewed in-degrees."""
    rng = np.random.default_rng(seed)

    def draw(exponent: float) -> np.ndarray:
        w = 1.0 / np.arange(1, NUM_NODES + 1) ** exponent
        ids = rng.choice(NUM_NODES, NUM_EDGES, p=w / w.sum())
        return rng.permutation(NUM_NODES)[ids]

    edge_index = torch.from_numpy(np.stack([draw(0.8), draw(0.3)]))
    x = torch.randn(NUM_NODES, FEATURES, generator=torch.Generator().manual_seed(seed))
    y = torch.randint(0, CLASSES, (NUM_NODES,), generator=torch.Generator().manual_seed(seed))
    return Data(x=x, y=y, edge_index=edge_index, num_nodes=NUM_NODES)


def sampled_batches(data: Data, count: int) -> list[Data]:
    from app.loader import NeighborLoader

    loader = NeighborLoader(
        data, FANOUTS, input_nodes=torch.arange(NUM_NODES), batch_size=BATCH, shuffle=True
    )
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == count:
            return batches
    return batches


def pyg_step(model: nn.Module, opt: torch.optim.Optimizer, batch: Data, trim: bool) -> None:
    opt.zero_grad()
    kwargs = {}
    if trim:
        kwargs = dict(
            num_sampled_nodes_per_hop=batch.num_sampled_nodes,
            num_sampled_edges_per_hop=batch.num_sampled_edges,
        )
    out = model(batch.x, batch.edge_index, **kwargs)[: batch.batch_size]
    F.cross_entropy(out, batch.y[: batch.batch_size]).backward()
    opt.step()


def our_step(model: nn.Module, opt: torch.optim.Optimizer, batch: Data) -> None:
    opt.zero_grad()
    out = model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    F.cross_entropy(out[: batch.batch_size], batch.y[: batch.batch_size]).backward()
    opt.step()


def main(reps: int = 3) -> None:
    from torch_geometric.nn import GraphSAGE

    from app.config import ModelConfig
    from app.model.registry import build_model

    torch.manual_seed(0)
    data = power_law_graph()
    batches = sampled_batches(data, reps)
    nodes = statistics.mean(b.num_nodes for b in batches)
    edges = statistics.mean(b.edge_index.size(1) for b in batches)
    print(f"batches: {nodes:,.0f} nodes, {edges:,.0f} edges on average", flush=True)

    pyg = GraphSAGE(FEATURES, HIDDEN, LAYERS, CLASSES, dropout=DROPOUT)
    cfg = ModelConfig(name="sage", hidden_channels=HIDDEN, num_layers=LAYERS, dropout=DROPOUT)
    ours = build_model(cfg, FEATURES, CLASSES)
    opt_pyg = torch.optim.Adam(pyg.parameters())
    opt_ours = torch.optim.Adam(ours.parameters())
    steps = {
        "pyg_plain": lambda b: pyg_step(pyg, opt_pyg, b, trim=False),
        "pyg_trim": lambda b: pyg_step(pyg, opt_pyg, b, trim=True),
        "ours": lambda b: our_step(ours, opt_ours, b),
    }
    for step in steps.values():  # warm-up (allocator, lazy init)
        step(batches[0])
    times: dict[str, list[float]] = {name: [] for name in steps}
    for batch in batches:
        for name, step in steps.items():
            t0 = time.perf_counter()
            step(batch)
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    record(BENCH, "pyg_plain_step_s", med["pyg_plain"], "s")
    record(
        BENCH,
        "pyg_trim_step_s",
        med["pyg_trim"],
        "s",
        compared_to="pyg_plain_step_s",
        ratio=med["pyg_plain"] / med["pyg_trim"],
    )
    record(
        BENCH,
        "ours_step_s",
        med["ours"],
        "s",
        compared_to="pyg_plain_step_s",
        ratio=med["pyg_plain"] / med["ours"],
    )
    record(
        BENCH,
        "ours_vs_pyg_trim",
        med["pyg_trim"] / med["ours"],
        "x",
        compared_to="pyg_trim_step_s",
        ratio=med["pyg_trim"] / med["ours"],
    )


if __name__ == "__main__":
    main()
