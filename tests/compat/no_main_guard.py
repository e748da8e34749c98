"""A PyG-style script with no `if __name__ == "__main__":` guard, which PyG's loaders allow
(their sampler workers are forks): one pass over this rank's training nodes with one sampler
process per rank. Launched by hand, `--node_rank 0/1`."""

import argparse
import os.path as osp

import torch

from app.distributed import (
    DistContext,
    DistNeighborLoader,
    LocalFeatureStore,
    LocalGraphStore,
    load_partition_info,
)

parser = argparse.ArgumentParser()
parser.add_argument("--node_rank", type=int, default=0)
parser.add_argument("--dataset_root_dir", type=str)
parser.add_argument("--port", type=int)
args = parser.parse_args()
part_dir = osp.join(args.dataset_root_dir, "homo-partitions")
graph = LocalGraphStore.from_partition(part_dir, args.node_rank)
feature = LocalFeatureStore.from_partition(part_dir, args.node_rank)
meta, num_parts, idx, node_pb, edge_pb = load_partition_info(part_dir, args.node_rank)
graph.labels = torch.load(osp.join(args.dataset_root_dir, "homo-label", "label.pt"))
train_idx = torch.load(
    osp.join(args.dataset_root_dir, "homo-train-partitions", f"partition{args.node_rank}.pt")
)
ctx = DistContext(world_size=2, rank=args.node_rank, global_world_size=2,
                  global_rank=args.node_rank, group_name="unguarded")  # fmt: skip
loader = DistNeighborLoader((feature, graph), [3, 2], "127.0.0.1", args.port, ctx,
                            input_nodes=train_idx, batch_size=16, num_workers=1)  # fmt: skip
seen = sum(int(batch.batch_size) for batch in loader)
print(f"-- [node {args.node_rank}] {seen} seeds of {train_idx.numel()}", flush=True)
loader.close()
print(f"-- [node {args.node_rank}] training done", flush=True)
