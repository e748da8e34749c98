"""Distributed GraphSAGE link prediction in the style of PyG's distributed examples, written
from PyG's documentation only (`DistLinkNeighborLoader`, `LocalGraphStore.get_edge_index`);
the imports are the one change. One process per node, launched by hand with --node_rank.
"""

import argparse
import os.path as osp
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE, to_hetero
from torch_geometric.sampler import NegativeSampling

# was: from torch_geometric.distributed import ...
from app.distributed import (
    DistContext,
    DistLinkNeighborLoader,
    LocalFeatureStore,
    LocalGraphStore,
)

EDGE_TYPE = ("paper", "cites", "paper")


def train_epoch(model, optimizer, train_loader, is_hetero):
    for batch in train_loader:
        optimizer.zero_grad()
        if is_hetero:
            z = model(batch.x_dict, batch.edge_index_dict)["paper"]
            store = batch[EDGE_TYPE]
        else:
            z, store = model(batch.x, batch.edge_index), batch
        src, dst = store.edge_label_index
        pred = (z[src] * z[dst]).sum(dim=-1)
        loss = F.binary_cross_entropy_with_logits(pred, store.edge_label)
        loss.backward()
        optimizer.step()
    return loss


def run_proc(num_nodes, node_rank, dataset, root_dir, master_addr, ddp_port, loader_port,
             num_epochs, batch_size, num_neighbors, concurrency, num_workers):  # fmt: skip
    is_hetero = dataset == "hetero"
    part_dir = osp.join(root_dir, f"{dataset}-partitions")
    graph = LocalGraphStore.from_partition(part_dir, node_rank)
    feature = LocalFeatureStore.from_partition(part_dir, node_rank)
    partition_data = (feature, graph)

    current_ctx = DistContext(world_size=num_nodes, rank=node_rank, global_world_size=num_nodes,
                              global_rank=node_rank, group_name="distributed-sage-link")  # fmt: skip
    torch.distributed.init_process_group(backend="gloo", rank=current_ctx.rank,
                                         world_size=current_ctx.world_size,
                                         init_method=f"tcp://{master_addr}:{ddp_port}")  # fmt: skip

    # the edges this partition owns, as PyG's GraphStore API gives them (COO)
    row, col = graph.get_edge_index(edge_type=EDGE_TYPE if is_hetero else None, layout="coo")
    edge_label_index = torch.stack([row, col])
    n = torch.tensor(edge_label_index.size(1))
    torch.distributed.all_reduce(n, op=torch.distributed.ReduceOp.MIN)  # same batch count
    edge_label_index = edge_label_index[:, : int(n)]
    if is_hetero:
        edge_label_index = (EDGE_TYPE, edge_label_index)

    train_loader = DistLinkNeighborLoader(
        partition_data, num_neighbors, master_addr, loader_port, current_ctx,
        edge_label_index=edge_label_index, neg_sampling=NegativeSampling("binary"),
        batch_size=batch_size, shuffle=True, num_workers=num_workers, concurrency=concurrency,
    )  # fmt: skip

    model = GraphSAGE(in_channels=-1 if is_hetero else 8, hidden_channels=16, num_layers=2,
                      out_channels=16)  # fmt: skip
    if is_hetero:
        meta = graph.meta
        model = to_hetero(model, (meta["node_types"], [tuple(e) for e in meta["edge_types"]]))
    if is_hetero:
        with torch.no_grad(), train_loader as iterator:  # initialise the lazy layers before DDP
            batch = next(iterator)
            model(batch.x_dict, batch.edge_index_dict)
    model = DistributedDataParallel(model, find_unused_parameters=is_hetero)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(num_epochs):
        model.train()
        threads = train_loader.enable_multithreading(1) if num_workers else nullcontext()
        with threads:  # PyG's: torch threads of each sampler process while in the block
            loss = train_epoch(model, optimizer, train_loader, is_hetero)
        print(f"-- [node {node_rank}] epoch {epoch}: loss {loss.item():.4f} "
              f"({len(train_loader)} batches)", flush=True)  # fmt: skip
    print(f"-- [node {node_rank}] training done", flush=True)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", type=str, default="homo")
    parser.add_argument("--dataset_root_dir", type=str, default="./data")
    parser.add_argument("--num_nodes", type=int, default=2)
    parser.add_argument("--node_rank", type=int, default=0)
    parser.add_argument("--master_addr", type=str, default="127.0.0.1")
    parser.add_argument("--ddp_port", type=int, default=11111)
    parser.add_argument("--train_loader_port", type=int, default=11112)
    parser.add_argument("--num_epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--num_neighbors", type=str, default="5,3")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--num_workers", type=int, default=2)
    args = parser.parse_args()
    run_proc(args.num_nodes, args.node_rank, args.dataset, args.dataset_root_dir,
             args.master_addr, args.ddp_port, args.train_loader_port, args.num_epochs,
             args.batch_size, [int(i) for i in args.num_neighbors.split(",")],
             args.concurrency, args.num_workers)  # fmt: skip
