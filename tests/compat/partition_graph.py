"""Partition a graph the way PyG's `examples/distributed/pyg/partition_graph.py` does.

Written from PyG's documentation only; the one change is the import line. The dataset is a
small generated one (the examples use OGB and MovieLens, which need a download): `--dataset
homo` (a Data), `hetero` (a HeteroData with labelled `paper` nodes) or `movielens` (MovieLens'
shape: users without features, movies with, timed ratings made undirected; the example's 80/10/10
temporal link split into per-rank `edge_label_index` / `edge_label` / `edge_label_time` files).
"""

import argparse
import os
import os.path as osp

import torch
import torch_geometric.transforms as T
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


def make_movielens(users: int = 200, movies: int = 120, ratings: int = 2000) -> HeteroData:
    """MovieLens' layout (`torch_geometric.datasets.MovieLens` after ToUndirected(merge=True)):
    movie features, ratings 0..5 as `edge_label` and distinct rating times as `time`."""
    gen = torch.Generator().manual_seed(2)
    data = HeteroData()
    data["user"].num_nodes = users
    data["movie"].x = torch.randn(movies, 16, generator=gen)
    rates = ("user", "rates", "movie")
    data[rates].edge_index = torch.stack([torch.randint(0, users, (ratings,), generator=gen),
                                          torch.randint(0, movies, (ratings,), generator=gen)])  # fmt: skip
    data[rates].edge_label = torch.randint(0, 6, (ratings,), generator=gen)
    data[rates].time = torch.randperm(ratings, generator=gen) + 1
    return T.ToUndirected(merge=True)(data)


def save_link_partitions(data: HeteroData, root_dir: str, num_parts: int) -> None:
    """The example's temporal 80/10/10 link split, each split cut into one file per rank."""
    edge_type = data.edge_types[0]
    perm = torch.argsort(data[edge_type].time)
    cut = (int(0.8 * perm.numel()), int(0.9 * perm.numel()))
    splits = {"train": perm[: cut[0]], "val": perm[cut[0] : cut[1]], "test": perm[cut[1] :]}
    for key, idx in splits.items():
        print(f"-- Partitioning {key} indices ...")
        n = idx.numel() // num_parts
        part_dir = osp.join(root_dir, f"movielens-{key}-partitions")
        os.makedirs(part_dir, exist_ok=True)
        for i in range(num_parts):
            ids = idx[i * n : (i + 1) * n]
            partition = {"edge_label_index": data[edge_type].edge_index[:, ids],
                         "edge_label": data[edge_type].edge_label[ids],
                         "edge_label_time": data[edge_type].time[ids] - 1}  # fmt: skip
            torch.save(partition, osp.join(part_dir, f"partition{i}.pt"))


def partition_dataset(dataset: str, root_dir: str, num_parts: int, recursive: bool = False,
                      **sizes: int):  # fmt: skip
    """`sizes`: make_homo's sizes (num_nodes, num_edges, num_features) for a larger graph."""
    save_dir = osp.join(root_dir, f"{dataset}-partitions")
    makers = {
        "homo": lambda: make_homo(**sizes),
        "hetero": make_hetero,
        "movielens": make_movielens,
    }
    data = makers[dataset]()
    partitioner = Partitioner(data, num_parts, save_dir, recursive)
    partitioner.generate_partition()

    print("-- Saving label ...")
    label_dir = osp.join(root_dir, f"{dataset}-label")
    os.makedirs(label_dir, exist_ok=True)
    if dataset == "movielens":  # the ratings of the first edge type, one per edge
        torch.save(data[data.edge_types[0]].edge_label, osp.join(label_dir, "label.pt"))
        save_link_partitions(data, root_dir, num_parts)
        return
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
