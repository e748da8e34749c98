"""Distributed temporal link regression on MovieLens in the style of PyG's recipe
(`examples/distributed/pyg/temporal_link_movielens_cpu.py`, PyG 2.6): a `to_hetero` SAGE
encoder and an MLP decoder predict ratings; `DistLinkNeighborLoader(disjoint=True,
time_attr='edge_time', temporal_strategy='last', edge_label_time=...)`; DDP. Written from that
recipe's calls; the imports are the one change. One process per node, `--node_rank 0/1`.

`--record_dir` (for the test): rank 0 saves the parameters DDP starts from, every rank its
per-step losses and its test predictions, so a single-machine run can be compared with it.
"""

import argparse
import os.path as osp
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn import Linear
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import SAGEConv, to_hetero

# was: from torch_geometric.distributed import ...
from app.distributed import (
    DistContext,
    DistLinkNeighborLoader,
    LocalFeatureStore,
    LocalGraphStore,
)

RATES = ("user", "rates", "movie")


class GNNEncoder(torch.nn.Module):
    def __init__(self, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden_channels)
        self.conv2 = SAGEConv((-1, -1), out_channels)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


class EdgeDecoder(torch.nn.Module):
    def __init__(self, hidden_channels):
        super().__init__()
        self.lin1 = Linear(2 * hidden_channels, hidden_channels)
        self.lin2 = Linear(hidden_channels, 1)

    def forward(self, z_dict, edge_label_index):
        row, col = edge_label_index
        z = torch.cat([z_dict["user"][row], z_dict["movie"][col]], dim=-1)
        return self.lin2(self.lin1(z).relu()).view(-1)


class Model(torch.nn.Module):
    def __init__(self, hidden_channels, metadata):
        super().__init__()
        self.encoder = to_hetero(GNNEncoder(hidden_channels, hidden_channels), metadata, aggr="sum")
        self.decoder = EdgeDecoder(hidden_channels)

    def forward(self, x_dict, edge_index_dict, edge_label_index):
        return self.decoder(self.encoder(x_dict, edge_index_dict), edge_label_index)


def run_epoch(model, loader, optimizer, num_loader_threads):
    """One pass over `loader`: training with `optimizer`, else evaluation (predictions)."""
    out = []
    threads = loader.enable_multithreading(num_loader_threads) if loader.num_workers else None
    with threads or nullcontext():
        for batch in loader:
            if optimizer is not None:
                optimizer.zero_grad()
            pred = model(batch.x_dict, batch.edge_index_dict,
                         batch["user", "movie"].edge_label_index)  # fmt: skip
            target = batch["user", "movie"].edge_label.float()
            if optimizer is None:
                out.append(pred.clamp(min=0, max=5))
                continue
            loss = F.mse_loss(pred, target)
            loss.backward()
            optimizer.step()
            out.append(loss.item())
    torch.distributed.barrier()
    return out


def run_proc(args):
    root_dir = args.dataset_root_dir
    train_data = torch.load(osp.join(root_dir, "movielens-train-partitions",
                                     f"partition{args.node_rank}.pt"))  # fmt: skip
    test_data = torch.load(osp.join(root_dir, "movielens-test-partitions",
                                    f"partition{args.node_rank}.pt"))  # fmt: skip
    graph = LocalGraphStore.from_partition(osp.join(root_dir, "movielens-partitions"),
                                           args.node_rank)  # fmt: skip
    feature = LocalFeatureStore.from_partition(osp.join(root_dir, "movielens-partitions"),
                                               args.node_rank)  # fmt: skip
    feature.labels = torch.load(osp.join(root_dir, "movielens-label", "label.pt"))
    partition_data = (feature, graph)
    # identity user features for message passing, as the recipe adds them
    x = torch.eye(feature._global_id["user"].size(0), feature._feat[("movie", "x")].size(1))
    feature.put_tensor(x, group_name="user", attr_name="x")

    current_ctx = DistContext(world_size=args.num_nodes, rank=args.node_rank,
                              global_world_size=args.num_nodes, global_rank=args.node_rank,
                              group_name="distributed-temporal-link-movielens")  # fmt: skip
    torch.distributed.init_process_group(backend="gloo", rank=current_ctx.rank,
                                         world_size=current_ctx.world_size,
                                         init_method=f"tcp://{args.master_addr}:{args.ddp_port}")  # fmt: skip

    num_neighbors = [int(i) for i in args.num_neighbors.split(",")]
    common = dict(disjoint=True, time_attr="edge_time", temporal_strategy="last",
                  current_ctx=current_ctx, device=torch.device("cpu"),
                  num_neighbors=num_neighbors, persistent_workers=args.num_workers > 0,
                  batch_size=args.batch_size, num_workers=args.num_workers,
                  master_addr=args.master_addr, concurrency=args.concurrency,
                  async_sampling=True)  # fmt: skip
    train_loader = DistLinkNeighborLoader(
        data=partition_data, edge_label_index=(RATES, train_data["edge_label_index"]),
        edge_label=train_data["edge_label"], edge_label_time=train_data["edge_label_time"],
        shuffle=True, drop_last=True, master_port=args.train_loader_port, **common,
    )  # fmt: skip
    test_loader = DistLinkNeighborLoader(
        data=partition_data, edge_label_index=(RATES, test_data["edge_label_index"]),
        edge_label=test_data["edge_label"], edge_label_time=test_data["edge_label_time"],
        shuffle=False, drop_last=False, master_port=args.test_loader_port, **common,
    )  # fmt: skip

    metadata = (graph.meta["node_types"], [tuple(e) for e in graph.meta["edge_types"]])
    model = Model(hidden_channels=32, metadata=metadata)
    with torch.no_grad(), train_loader as iterator:  # the recipe's parameter initialisation
        batch = next(iter(iterator))
        model(batch.x_dict, batch.edge_index_dict, batch["user", "movie"].edge_label_index)
    torch.distributed.barrier()
    model = DistributedDataParallel(model, find_unused_parameters=False)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    torch.distributed.barrier()
    record = args.record_dir and osp.join(args.record_dir, f"rank{args.node_rank}.pt")
    if args.record_dir and args.node_rank == 0:
        torch.save(model.module.state_dict(), osp.join(args.record_dir, "init.pt"))

    losses = []
    for epoch in range(1, args.num_epochs + 1):
        model.train()
        losses += run_epoch(model, train_loader, optimizer, args.num_loader_threads)
        print(f"-- [node {args.node_rank}] epoch {epoch}: loss {losses[-1]:.4f}", flush=True)
    model.eval()
    with torch.no_grad():
        pred = torch.cat(run_epoch(model, test_loader, None, args.num_loader_threads))
    rmse = (pred - test_data["edge_label"].float()).pow(2).mean().sqrt()
    print(f"-- [node {args.node_rank}] test rmse {rmse:.4f}", flush=True)
    if record:
        torch.save({"losses": losses, "pred": pred}, record)
    print(f"-- [node {args.node_rank}] training done", flush=True)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset_root_dir", type=str, default="./data")
    parser.add_argument("--num_nodes", type=int, default=2)
    parser.add_argument("--node_rank", type=int, default=0)
    parser.add_argument("--num_epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--num_neighbors", type=str, default="5,3")
    parser.add_argument("--num_workers", type=int, default=0)
    parser.add_argument("--num_loader_threads", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--master_addr", type=str, default="127.0.0.1")
    parser.add_argument("--ddp_port", type=int, default=11111)
    parser.add_argument("--train_loader_port", type=int, default=11112)
    parser.add_argument("--test_loader_port", type=int, default=11113)
    parser.add_argument("--record_dir", type=str, default="")
    run_proc(parser.parse_args())
