"""Distributed GraphSAGE node classification in the style of PyG's
`examples/distributed/pyg/node_ogb_cpu.py` (its design document, section 2-4), written from PyG's
documentation only; the imports are the one change. One process per node, launched by hand:

    python node_sage.py --dataset homo --node_rank 0 --num_nodes 2 ...
    python node_sage.py --dataset homo --node_rank 1 --num_nodes 2 ...
"""

import argparse
import os.path as osp
import time

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE, to_hetero

# was: import torch_geometric.distributed as pyg_dist
import app.distributed as pyg_dist

# was: from torch_geometric.distributed import DistContext, DistNeighborLoader, ...
from app.distributed import (
    DistContext,
    DistNeighborLoader,
    LocalFeatureStore,
    LocalGraphStore,
    load_partition_info,
)


@torch.no_grad()
def test(model, loader, dataset):
    model.eval()
    correct = total = 0
    for batch in loader:
        if dataset == "hetero":
            out = model(batch.x_dict, batch.edge_index_dict)["paper"]
            bs, y = batch["paper"].batch_size, batch["paper"].y
        else:
            out, bs, y = model(batch.x, batch.edge_index), batch.batch_size, batch.y
        correct += int((out[:bs].argmax(dim=-1) == y[:bs]).sum())
        total += bs
    torch.distributed.all_reduce(t := torch.tensor([correct, total]))
    return int(t[0]) / max(int(t[1]), 1)


def run_proc(local_proc_rank, num_nodes, node_rank, dataset, root_dir, master_addr, ddp_port,
             train_loader_port, test_loader_port, num_epochs, batch_size, num_neighbors,
             async_sampling, concurrency, num_workers, num_training_procs_per_node,
             in_channels=8, loader_kwargs=None):  # fmt: skip
    is_hetero = dataset == "hetero"
    part_dir = osp.join(root_dir, f"{dataset}-partitions")
    print("--- Loading data partition files ...")
    graph = LocalGraphStore.from_partition(part_dir, node_rank)
    feature = LocalFeatureStore.from_partition(part_dir, node_rank)
    (meta, num_partitions, partition_idx, node_pb, edge_pb) = load_partition_info(
        part_dir, node_rank
    )
    graph.num_partitions = feature.num_partitions = num_partitions
    graph.partition_idx = feature.partition_idx = partition_idx
    graph.node_pb = feature.node_feat_pb = feature.feature_pb = node_pb
    graph.edge_pb = feature.edge_feat_pb = edge_pb
    graph.meta = feature.meta = meta
    graph.labels = torch.load(osp.join(root_dir, f"{dataset}-label", "label.pt"))
    partition_data = (feature, graph)

    train_idx = torch.load(osp.join(root_dir, f"{dataset}-train-partitions",
                                    f"partition{node_rank}.pt"))  # fmt: skip
    test_idx = torch.load(osp.join(root_dir, f"{dataset}-test-partitions",
                                   f"partition{node_rank}.pt"))  # fmt: skip
    train_idx = train_idx.split(train_idx.size(0) // num_training_procs_per_node)[local_proc_rank]
    test_idx = test_idx.split(test_idx.size(0) // num_training_procs_per_node)[local_proc_rank]
    if is_hetero:
        train_idx, test_idx = ("paper", train_idx), ("paper", test_idx)

    current_ctx = DistContext(
        world_size=num_nodes * num_training_procs_per_node,
        rank=node_rank * num_training_procs_per_node + local_proc_rank,
        global_world_size=num_nodes * num_training_procs_per_node,
        global_rank=node_rank * num_training_procs_per_node + local_proc_rank,
        group_name="distributed-sage-supervised-trainer",
    )
    current_device = torch.device("cpu")
    torch.distributed.init_process_group(
        backend="gloo", rank=current_ctx.rank, world_size=current_ctx.world_size,
        init_method=f"tcp://{master_addr}:{ddp_port}",
    )  # fmt: skip

    train_loader = pyg_dist.DistNeighborLoader(
        data=partition_data, num_neighbors=num_neighbors, input_nodes=train_idx,
        batch_size=batch_size, shuffle=True, device=current_device, num_workers=num_workers,
        concurrency=concurrency, master_addr=master_addr, master_port=train_loader_port,
        async_sampling=async_sampling, filter_per_worker=False, current_ctx=current_ctx,
        **(loader_kwargs or {}),
    )  # fmt: skip
    # PyG's positional order: data, num_neighbors, master_addr, master_port, current_ctx
    test_loader = DistNeighborLoader(
        partition_data, num_neighbors, master_addr, test_loader_port, current_ctx,
        input_nodes=test_idx, batch_size=batch_size, shuffle=False, device=current_device,
        num_workers=num_workers, concurrency=concurrency, async_sampling=async_sampling,
        filter_per_worker=False,
    )  # fmt: skip

    model = GraphSAGE(in_channels=-1 if is_hetero else in_channels, hidden_channels=16, num_layers=2,
                      out_channels=3)  # fmt: skip
    if is_hetero:
        metadata = (meta["node_types"], [tuple(e) for e in meta["edge_types"]])
        model = to_hetero(model, metadata).to(current_device)
        with torch.no_grad():  # initialise the lazy layers before DDP
            batch = next(iter(train_loader))
            model(batch.x_dict, batch.edge_index_dict)
    model = DistributedDataParallel(model, find_unused_parameters=is_hetero)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    for epoch in range(num_epochs):
        model.train()
        start = time.time()
        for i, batch in enumerate(train_loader):
            optimizer.zero_grad()
            if is_hetero:
                out = model(batch.x_dict, batch.edge_index_dict)["paper"]
                bs, y = batch["paper"].batch_size, batch["paper"].y
            else:
                out, bs, y = model(batch.x, batch.edge_index), batch.batch_size, batch.y
            loss = F.cross_entropy(out[:bs], y[:bs])
            loss.backward()
            optimizer.step()
            if i == len(train_loader) - 1:
                torch.distributed.barrier()
        acc = test(model, test_loader, dataset)
        print(f"-- [node {node_rank}] epoch {epoch}: loss {loss.item():.4f} test acc {acc:.4f} "
              f"({time.time() - start:.1f} s, {i + 1} batches)", flush=True)  # fmt: skip
    print(f"-- [node {node_rank}] training done", flush=True)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", type=str, default="homo")
    parser.add_argument("--dataset_root_dir", type=str, default="./data")
    parser.add_argument("--num_nodes", type=int, default=2)
    parser.add_argument("--node_rank", type=int, default=0)
    parser.add_argument("--num_training_procs", type=int, default=1)
    parser.add_argument("--master_addr", type=str, default="127.0.0.1")
    parser.add_argument("--ddp_port", type=int, default=11111)
    parser.add_argument("--train_loader_port", type=int, default=11112)
    parser.add_argument("--test_loader_port", type=int, default=11113)
    parser.add_argument("--num_epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--num_neighbors", type=str, default="5,3")
    parser.add_argument("--async_sampling", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--in_channels", type=int, default=8)
    parser.add_argument("--init_timeout", type=float, default=None)  # not PyG's: ours
    args = parser.parse_args()
    run_proc(0, args.num_nodes, args.node_rank, args.dataset, args.dataset_root_dir,
             args.master_addr, args.ddp_port, args.train_loader_port, args.test_loader_port,
             args.num_epochs, args.batch_size, [int(i) for i in args.num_neighbors.split(",")],
             bool(args.async_sampling), args.concurrency, args.num_workers,
             args.num_training_procs, args.in_channels,
             {} if args.init_timeout is None else {"init_timeout": args.init_timeout})  # fmt: skip
