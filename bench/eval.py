"""Evaluation of val + test: exact layer-wise inference vs sampled neighbourhoods, side by side.

    python -m bench.eval [num_nodes] [train_steps] [parts]   # default: 200,000 nodes, 60 steps, 2

The `products_homo` experiment's graph and model (synthetic_products, GraphSAGE 2 layers,
hidden 128) are trained for `train_steps` batches of 1024 in one process (so accuracies mean
something), then evaluated on val + test:

* single process: `evaluate_layerwise(model, local_view(data), train.eval_chunk_size)` vs a
  `NeighborLoader` with the experiment's fan-out ([10, 5], `loader.eval_batch_size` seeds);
* `parts` partitions (METIS, relabelled and ordered as the experiment says), one trainer
  process each over real RPC + gloo on 127.0.0.1:
  `partition_view` + `evaluate_layerwise` vs `DistNeighborLoader` (sampling in the trainer).

Every measurement runs in fresh processes, so each peak RSS (VmHWM, the largest process
of the run) belongs to that evaluation mode alone (it includes loading the data / partition).
Each process evaluates twice, as a training job does once per epoch: `first` includes one-time
costs (numba kernels loaded, the view and its read plan built, its buffers faulted in), the
unprefixed time is the second evaluation (buffers kept as `train.eval_keep_buffers` says).
`eval_cpu` is the second evaluation's CPU time (all threads, summed over the ranks): on a
shared machine wall times swing with the other users' load, CPU time far less.
"""

from __future__ import annotations

import socket
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

from bench.common import record

BENCH = "eval"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(out: Path, num_nodes: int):
    from app.config import compose_config

    return compose_config(
        ["+experiment=products_homo", f"dataset.num_nodes={num_nodes}", f"dataset.root={out}/data"]
    )


def _data(cfg):
    from app.dataset import load_dataset

    return load_dataset(cfg.dataset, cfg.seed)


def _model(cfg, data):
    from app.model.registry import build_model

    return build_model(cfg.model, data.x.size(1), int(data.num_classes))


def _train(cfg, steps: int, out: Path) -> Path:
    """A briefly trained model, saved for the evaluation processes."""
    import torch.nn.functional as F

    from app.loader import NeighborLoader

    data = _data(cfg)
    torch.manual_seed(cfg.seed)
    model = _model(cfg, data)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.train.lr)
    loader = NeighborLoader(data, cfg.sampler.num_neighbors, input_nodes=data.train_mask,
                            batch_size=cfg.loader.batch_size, shuffle=True, seed=cfg.seed)  # fmt: skip
    for step, b in enumerate(loader):
        if step >= steps:
            break
        out_ = model(b.x, b.edge_index, b.num_sampled_nodes, b.num_sampled_edges)
        loss = F.cross_entropy(out_[: b.batch_size], b.y[: b.batch_size])
        opt.zero_grad()
        loss.backward()
        opt.step()
    path = out / "model.pt"
    torch.save(model.state_dict(), path)
    return path


def _peak_gb() -> float:
    """This process image's own peak (VmHWM): `ru_maxrss` survives exec, so every child of a
    2.4 GiB bench parent reported the parent's 2.389 GiB."""
    from app.partition.stream import own_peak_rss_gb

    return own_peak_rss_gb()


@torch.no_grad()
def _sampled_acc(model, loaders: dict) -> tuple[dict[str, float], dict[str, int]]:
    """(correct, count) per split from each seed's sampled neighbourhood."""
    correct, count = {}, {}
    for split, loader in loaders.items():
        c = n = 0
        for b in loader:
            out = model(b.x, b.edge_index, b.num_sampled_nodes, b.num_sampled_edges)
            pred = out[: b.batch_size].argmax(-1)
            c += int((pred == b.y[: b.batch_size].view(-1)).sum())
            n += int(b.batch_size)
        correct[split], count[split] = c, n
    return correct, count


def _local_child(mode: str, out: str, num_nodes: int, model_path: str, result: str) -> None:
    from app.inference import evaluate_layerwise, local_view

    torch.set_num_threads(1)
    cfg = _config(Path(out), num_nodes)
    data = _data(cfg)
    model = _model(cfg, data)
    model.load_state_dict(torch.load(model_path, weights_only=True))
    model.eval()
    times, view = [], None
    for _ in range(2):
        start, cpu = time.perf_counter(), time.process_time()
        if mode == "layerwise":
            view = view or local_view(data)
            keep = cfg.train.eval_keep_buffers  # as a job evaluates
            acc = evaluate_layerwise(model, view, cfg.train.eval_chunk_size, keep_buffers=keep)
        else:
            correct, count = _sampled_acc(model, _local_loaders(cfg, data))
            acc = {f"{s}_acc": correct[s] / count[s] for s in correct}
        times.append(time.perf_counter() - start)
    cpu = time.process_time() - cpu
    res = {"first_s": times[0], "time_s": times[1], "cpu_s": cpu, "peak_gb": _peak_gb()}
    torch.save({**acc, **res}, result)


def _local_loaders(cfg, data) -> dict:
    from app.loader import NeighborLoader

    return {
        s: NeighborLoader(
            data,
            cfg.sampler.num_neighbors,
            input_nodes=data[f"{s}_mask"],
            batch_size=cfg.loader.eval_batch_size,
            seed=cfg.seed,
        )  # fmt: skip
        for s in ("val", "test")
    }


def _spawn(target, args_of, n: int) -> None:
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=target, args=args_of(r)) for r in range(n)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout=1800)
            if p.exitcode != 0:
                raise RuntimeError(f"bench.eval worker exited with {p.exitcode}")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(10)


def _dist_child(rank: int, world: int, ports: tuple[int, int], mode: str, out: str,
                num_nodes: int, model_path: str, result: str) -> None:  # fmt: skip
    from datetime import timedelta

    from app.distributed import DistContext
    from app.distributed.rpc import init_rpc, shutdown_rpc
    from app.model.registry import build_model
    from app.partition.reader import load_partition

    torch.set_num_threads(1)
    cfg = _config(Path(out), num_nodes)
    ctx = DistContext(rank=rank, global_rank=rank, world_size=world, global_world_size=world,
                      group_name="bench", partition_idx=rank, num_partitions=world,
                      name=f"trainer{rank}-0")  # fmt: skip
    init_rpc(ctx, "127.0.0.1", ports[0], timeout_s=600.0)
    store = torch.distributed.TCPStore("127.0.0.1", ports[1], world, is_master=rank == 0,
                                       timeout=timedelta(seconds=120), wait_for_workers=True)  # fmt: skip
    torch.distributed.init_process_group("gloo", store=store, rank=rank, world_size=world,
                                         timeout=timedelta(seconds=1800))  # fmt: skip
    root = Path(out) / "part"
    part = load_partition(root, rank)
    state = torch.load(model_path, weights_only=True)
    in_channels = state["layers.0.lin_neigh.weight"].size(1)
    classes = state[f"layers.{cfg.model.num_layers - 1}.lin_neigh.weight"].size(0)
    model = build_model(cfg.model, in_channels, classes)
    model.load_state_dict(state)
    model.eval()
    times, view = [], None
    for _ in range(2):
        torch.distributed.barrier()
        start, cpu = time.perf_counter(), time.process_time()
        acc = _dist_eval(mode, cfg, ctx, part, model, view, str(root), ports[0])
        view = acc.pop("view")
        times.append(time.perf_counter() - start)
    cpu = torch.tensor([time.process_time() - cpu])  # the warm evaluation, summed over ranks
    torch.distributed.all_reduce(cpu)
    elapsed = torch.tensor([times[0], times[1], _peak_gb()])
    torch.distributed.all_reduce(elapsed, op=torch.distributed.ReduceOp.MAX)
    if rank == 0:
        res = dict(zip(("first_s", "time_s", "peak_gb"), elapsed.tolist(), strict=True))
        torch.save({**acc, **res, "cpu_s": float(cpu)}, result)
    torch.distributed.barrier()
    if view is not None:
        view.close()
    shutdown_rpc(60.0)
    torch.distributed.destroy_process_group()


def _dist_eval(mode: str, cfg, ctx, part, model, view, root: str, port: int) -> dict:
    """One distributed evaluation of val + test (accuracies all-reduced), plus the view used."""
    from app.distributed import DistNeighborLoader
    from app.inference import evaluate_layerwise, partition_view

    if mode == "layerwise":
        view = view or partition_view(part, ctx)
        keep = cfg.train.eval_keep_buffers  # as a job evaluates
        acc = evaluate_layerwise(model, view, cfg.train.eval_chunk_size, keep_buffers=keep)
    else:
        loaders = {
            s: DistNeighborLoader(
                root,
                cfg.sampler.num_neighbors,
                input_nodes=part.seeds[s],
                batch_size=cfg.loader.eval_batch_size,
                current_ctx=ctx,
                num_workers=0,
                master_port=port,
                rpc_timeout=600.0,
                concurrency=2,
                seed=cfg.seed,
            )
            for s in ("val", "test")
        }
        correct, count = _sampled_acc(model, loaders)
        sums = torch.tensor(
            [correct["val"], count["val"], correct["test"], count["test"]], dtype=torch.float64
        )
        torch.distributed.all_reduce(sums)
        acc = {"val_acc": float(sums[0] / sums[1]), "test_acc": float(sums[2] / sums[3])}
    return {**acc, "view": view}


def _report(tag: str, res: dict[str, dict]) -> None:
    lw, sp = res["layerwise"], res["sampled"]
    ref = f"sampled [10,5], {tag}, same run"
    for key, metric, unit in (("time_s", "eval_time", "s"), ("first_s", "first_eval_time", "s"),
                              ("cpu_s", "eval_cpu", "s"), ("peak_gb", "peak_rss", "GiB")):  # fmt: skip
        suffix = "_gb" if unit == "GiB" else "_s"
        record(BENCH, f"{metric}_sampled_{tag}{suffix}", sp[key], unit)
        ratio = lw[key] / sp[key]
        record(BENCH, f"{metric}_layerwise_{tag}{suffix}", lw[key], unit, ref, ratio)
    for mode, r in res.items():
        record(BENCH, f"test_acc_{mode}_{tag}", r["test_acc"], "acc")
        record(BENCH, f"val_acc_{mode}_{tag}", r["val_acc"], "acc")


def main(num_nodes: int = 200_000, steps: int = 60, parts: int = 2) -> None:
    from app.partition.writer import partition_graph

    with tempfile.TemporaryDirectory(prefix="distgnn-bench-eval-") as tmp:
        out = Path(tmp)
        cfg = _config(out, num_nodes)
        model_path = str(_train(cfg, steps, out))
        local = {}
        for mode in ("layerwise", "sampled"):
            result = str(out / f"local_{mode}.pt")
            _spawn(_local_child, lambda _, m=mode, r=result: (m, tmp, num_nodes, model_path, r), 1)
            local[mode] = torch.load(result, weights_only=True)
        _report("1proc", local)
        if parts > 1:
            p = cfg.partition  # as the experiment partitions (products_homo: locality order)
            partition_graph(
                _data(cfg), out / "part", parts, method="metis", relabel=p.relabel, order=p.order
            )
            dist = {}
            for mode in ("layerwise", "sampled"):
                result = str(out / f"dist_{mode}.pt")
                ports = (_free_port(), _free_port())
                _spawn(
                    _dist_child,
                    lambda r, m=mode, o=result, p=ports: (
                        r,
                        parts,
                        p,
                        m,
                        tmp,
                        num_nodes,
                        model_path,
                        o,
                    ),
                    parts,
                )
                dist[mode] = torch.load(result, weights_only=True)
            _report(f"{parts}part", dist)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(*(int(v) for v in a[:3]))
