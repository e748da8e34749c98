"""Distributed GraphSAGE with PyG's `torch_geometric.distributed` API, served by distgnn.

A PyG script with one change, its imports (`import app.distributed as pyg_dist`). It writes a
graph, partitions it in two (METIS), then trains on two ranks, each with `num_workers` sampler
processes, and prints each epoch's loss and test accuracy (docs/pyg-compat.md walks through it):

    python tools/compat/pyg_two_ranks.py --root ./pyg-demo              # both ranks on this machine
    python tools/compat/pyg_two_ranks.py --root DIR --node_rank 1 ...    # one rank (what it starts)

On two machines: partition once (`--partition_only`), copy DIR to both, and start
`--node_rank 0` and `--node_rank 1` with the same `--master_addr` (rank 0's address) and ports.
"""

import argparse
import os
import os.path as osp
import socket
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.data import Data
from torch_geometric.nn import GraphSAGE

import app.distributed as pyg_dist  # was: import torch_geometric.distributed as pyg_dist

NUM_PARTS = 2


def make_graph(num_nodes: int, num_features: int, num_classes: int = 4) -> Data:
    """Communities as classes (80 % of edges inside one), features a noisy class signal: replace
    with your own `Data` (x, y, edge_index, train/test masks)."""
    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, num_classes, (num_nodes,), generator=gen)
    x = torch.randn(num_nodes, num_features, generator=gen)
    x[:, :num_classes] += 1.5 * F.one_hot(y, num_classes)
    dst = torch.arange(num_nodes).repeat_interleave(10)
    src = torch.randint(0, num_nodes, (len(dst),), generator=gen)
    by_class = [torch.nonzero(y == c).view(-1) for c in range(num_classes)]
    inside = torch.rand(len(dst), generator=gen) < 0.8
    for c, members in enumerate(by_class):
        pick = inside & (y[dst] == c)
        src[pick] = members[torch.randint(0, len(members), (int(pick.sum()),), generator=gen)]
    train_mask = torch.rand(num_nodes, generator=gen) < 0.6
    edge_index = torch.stack([src, dst])
    return Data(x=x, y=y, edge_index=edge_index, train_mask=train_mask, test_mask=~train_mask)


def partition(root: str, num_nodes: int, num_features: int) -> None:
    """PyG's layout: `partitions/` (Partitioner's files) and the labels and split masks."""
    data = make_graph(num_nodes, num_features)
    pyg_dist.Partitioner(data, NUM_PARTS, osp.join(root, "partitions")).generate_partition()
    masks = {"y": data.y, "train_mask": data.train_mask, "test_mask": data.test_mask}
    torch.save(masks, osp.join(root, "labels.pt"))


@torch.no_grad()
def test(model, loader) -> float:
    model.eval()
    correct = total = 0
    for batch in loader:
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        correct += int((out.argmax(dim=-1) == batch.y[: batch.batch_size]).sum())
        total += batch.batch_size
    torch.distributed.all_reduce(counts := torch.tensor([correct, total]))
    return int(counts[0]) / max(int(counts[1]), 1)


def run_rank(args: argparse.Namespace) -> None:
    rank, part_dir = args.node_rank, osp.join(args.root, "partitions")
    graph = pyg_dist.LocalGraphStore.from_partition(part_dir, rank)
    feature = pyg_dist.LocalFeatureStore.from_partition(part_dir, rank)
    meta, num_parts, part_idx, node_pb, edge_pb = pyg_dist.load_partition_info(part_dir, rank)
    graph.num_partitions = feature.num_partitions = num_parts
    graph.partition_idx = feature.partition_idx = part_idx
    graph.node_pb = feature.node_feat_pb = feature.feature_pb = node_pb
    graph.edge_pb = feature.edge_feat_pb = edge_pb
    graph.meta = feature.meta = meta
    split = torch.load(osp.join(args.root, "labels.pt"))
    graph.labels = split["y"]
    # Each rank trains on the nodes its partition owns: the ranks' counts differ (uneven batches).
    mine = node_pb == rank
    train_idx = torch.nonzero(split["train_mask"] & mine).view(-1)
    test_idx = torch.nonzero(split["test_mask"] & mine).view(-1)

    ctx = pyg_dist.DistContext(world_size=NUM_PARTS, rank=rank, global_world_size=NUM_PARTS,
                               global_rank=rank, group_name="pyg-two-ranks")  # fmt: skip
    torch.distributed.init_process_group(
        "gloo", rank=rank, world_size=NUM_PARTS,
        init_method=f"tcp://{args.master_addr}:{args.ddp_port}",
    )  # fmt: skip
    common = dict(data=(feature, graph), num_neighbors=[10, 5], batch_size=args.batch_size,
                  num_workers=args.num_workers, concurrency=2, master_addr=args.master_addr,
                  current_ctx=ctx, device=torch.device("cpu"))  # fmt: skip
    # One port per loader: each has its own RPC group of trainers and sampler processes.
    train_loader = pyg_dist.DistNeighborLoader(
        input_nodes=train_idx, shuffle=True, master_port=args.train_port, **common
    )
    test_loader = pyg_dist.DistNeighborLoader(
        input_nodes=test_idx, shuffle=False, master_port=args.test_port, **common
    )
    model = DistributedDataParallel(GraphSAGE(args.num_features, 64, num_layers=2, out_channels=4))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        model.train()
        start, losses = time.time(), []
        # PyG's trap: ranks with different numbers of batches. DDP averages gradients in every
        # backward, so a rank with batches left waits for one that has finished (a hang, or
        # gloo's timeout). `join()` lets a finished rank shadow those collectives.
        with model.join():
            for batch in train_loader:
                optimizer.zero_grad()
                out = model(batch.x, batch.edge_index)[: batch.batch_size]
                loss = F.cross_entropy(out, batch.y[: batch.batch_size])
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
        acc = test(model, test_loader)
        print(f"[rank {rank}] epoch {epoch}: loss {sum(losses) / len(losses):.4f}, test acc "
              f"{acc:.4f}, {len(losses)} batches, {time.time() - start:.1f} s", flush=True)  # fmt: skip
    print(f"[rank {rank}] training done", flush=True)
    torch.distributed.destroy_process_group()


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_both(args: argparse.Namespace) -> int:
    """Both ranks as processes of their own (as on two machines); the first failure ends both."""
    ports = free_ports(3)
    names = ("--ddp_port", "--train_port", "--test_port")
    base = [sys.executable, osp.abspath(__file__), "--root", args.root]
    base += [f"--{k}={getattr(args, k)}" for k in ("epochs", "num_workers", "batch_size")]
    base += [f"--num_features={args.num_features}"]
    base += [f"{name}={port}" for name, port in zip(names, ports, strict=True)]
    ranks = [subprocess.Popen([*base, f"--node_rank={r}"]) for r in range(NUM_PARTS)]
    while all(p.poll() is None for p in ranks):
        time.sleep(0.5)
    if any(p.poll() not in (None, 0) for p in ranks):
        for p in ranks:
            p.kill()
    return max(p.wait() for p in ranks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default="./pyg-demo")
    parser.add_argument("--num_nodes", type=int, default=20_000)
    parser.add_argument("--num_features", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--num_workers", type=int, default=2)  # sampler processes per rank
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--partition_only", action="store_true")
    parser.add_argument("--node_rank", type=int, default=None)  # none: partition, start both
    parser.add_argument("--master_addr", default="127.0.0.1")
    parser.add_argument("--ddp_port", type=int, default=11111)
    parser.add_argument("--train_port", type=int, default=11112)
    parser.add_argument("--test_port", type=int, default=11113)
    args = parser.parse_args()
    if args.node_rank is not None:
        run_rank(args)
        return 0
    if not osp.exists(osp.join(args.root, "labels.pt")):
        os.makedirs(args.root, exist_ok=True)
        partition(args.root, args.num_nodes, args.num_features)
    return 0 if args.partition_only else run_both(args)


if __name__ == "__main__":
    sys.exit(main())
