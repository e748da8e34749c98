"""Partition a graph the way PyG's `examples/distributed/pyg/partition_graph.py` does.

Written from PyG's documentation only; the one change is the import line. The dataset is a
small generated one (the examples use OGB, which needs a download): `--dataset homo` (a
Data) or `--dataset hetero` (a HeteroData with labelled `paper` nodes).
"""

import argparse
import os
import os.path as osp

import torch
from torch_geometric.data import Data, HeteroData

from app.distributed import Partitioner  # was: from torch_geometric.distributed import ...


def make_homo(num_nodes: int = 240, num_edges: int = 1600, num_features: int = 8) -> Data:
    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, 3, (num_nodes,), generator=gen)
    x = torch.randn(num_nodes, num_features, generator=gen) + y.unsqueeze(1).float()
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen)
    train_mask = torch.rand(num_nodes, generator=gen) < 0.6
    return Data(x=x, y=y, edge_index=edge_index, train_mask=train_mask, test_mask=~train_mask)


def make_hetero(papers: int = 200, authors: int = 120) -> HeteroData:
    gen = torch.Generator().manual_seed(1)
    data = HeteroData()
    y = torch.randint(0, 3, (papers,), generator=gen)
    data["paper"].x = torch.randn(papers, 8, generator=gen) + y.unsqueeze(1).float()
    data["paper"].y = y
    data["paper"].train_mask = torch.rand(papers, generator=gen) < 0.6
    data["paper"].test_mask = ~data["paper"].train_mask
    data["author"].x = torch.randn(authors, 8, generator=gen)
    cites = torch.randint(0, papers, (2, 900), generator=gen)
    writes = torch.stack([torch.randint(0, authors, (500,), generator=gen),
                          torch.randint(0, papers, (500,), generator=gen)])  # fmt: skip
    data["paper", "cites", "paper"].edge_index = cites
    data["author", "writes", "paper"].edge_index = writes
    data["paper", "rev_writes", "author"].edge_index = writes.flip(0)
    return data


def partition_dataset(dataset: str, root_dir: str, num_parts: int, recursive: bool = False,
                      **sizes: int):  # fmt: skip
    """`sizes`: make_homo's sizes (num_nodes, num_edges, num_features) for a larger graph."""
    save_dir = osp.join(root_dir, f"{dataset}-partitions")
    data = make_homo(**sizes) if dataset == "homo" else make_hetero()
    partitioner = Partitioner(data, num_parts, save_dir, recursive)
    partitioner.generate_partition()

    print("-- Saving label ...")
    label_dir = osp.join(root_dir, f"{dataset}-label")
    os.makedirs(label_dir, exist_ok=True)
    store = data if dataset == "homo" else data["paper"]
    torch.save(store.y.squeeze(), osp.join(label_dir, "label.pt"))

    for split in ("train", "test"):
        print(f"-- Partitioning {split} indices ...")
        idx = store[f"{split}_mask"].nonzero().view(-1)
        idx = idx.split(idx.size(0) // num_parts)
        part_dir = osp.join(root_dir, f"{dataset}-{split}-partitions")
        os.makedirs(part_dir, exist_ok=True)
        for i in range(num_parts):
            torch.save(idx[i], osp.join(part_dir, f"partition{i}.pt"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", type=str, default="homo")
    parser.add_argument("--root_dir", type=str, default="./data")
    parser.add_argument("--num_partitions", type=int, default=2)
    parser.add_argument("--recursive", action="store_true")
    args = parser.parse_args()
    partition_dataset(args.dataset, args.root_dir, args.num_partitions, args.recursive)
