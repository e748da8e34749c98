"""PyG's `Partitioner` and the side files PyG's example scripts read, on our writer.

`Partitioner(data, num_parts, root, recursive=False).generate_partition()` is PyG's call; it
writes through `partition_graph` (METIS), so the folder is PyG's layout that both PyG's stores
and ours read. PyG's scripts keep labels and seed splits beside the partition folder, named
after it: for `root = <dir>/<name>-partitions` they are

    <dir>/<name>-label/label.pt                  labels by global id (hetero: {type: labels})
    <dir>/<name>-<split>-partitions/partition<i>.pt   split seeds of part i (train/val/test)

A folder not named `*-partitions` (the `partition` task's default) keeps them inside instead:
`<root>/label/label.pt`, `<root>/<split>-partitions/partition<i>.pt`. `write_side_files`
writes them from a partition (the `partition` task does); `read_labels` finds the label file
for stores whose partition holds no `y`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from app.contract import SPLITS
from app.fsutil import torch_save_atomic


def _base(root: Path) -> tuple[Path, str]:
    """(folder, name prefix) of the side files: PyG's, beside `<name>-partitions`; inside any
    other partition folder (so a folder of partitions holds only partitions)."""
    root = Path(root)
    if root.name.endswith("-partitions"):
        return root.parent, root.name[: -len("-partitions")] + "-"
    return root, ""


def label_file(root: str | os.PathLike) -> Path:
    """Where PyG's scripts keep the labels of the partition at `root`."""
    base, prefix = _base(Path(root))
    return base / f"{prefix}label" / "label.pt"


def split_file(root: str | os.PathLike, split: str, part: int) -> Path:
    """Where PyG's scripts keep part `part`'s seeds of `split` (train / val / test)."""
    base, prefix = _base(Path(root))
    return base / f"{prefix}{split}-partitions" / f"partition{part}.pt"


def read_labels(root: str | os.PathLike) -> Tensor | dict[str, Tensor] | None:
    """The label file of the partition at `root`, or None when there is none."""
    path = label_file(root)
    if not path.is_file():
        return None
    try:
        return torch.load(path, weights_only=True, mmap=True)
    except Exception as err:
        raise ValueError(f"{path}: unreadable label file ({err}); rewrite or remove it") from None


def _one_or_dict(values: dict[Any, Tensor]) -> Any:
    """A lone entry as itself (homogeneous, or the one labelled type), else the dict."""
    return next(iter(values.values())) if len(values) == 1 else values


def write_side_files(root: str | os.PathLike) -> list[Path]:
    """Write the label and split files of the partition at `root` (PyG's script layout)."""
    from app.partition.reader import load_partition, read_meta

    root = Path(root)
    num_parts = int(read_meta(root)["num_parts"])
    labels: dict[Any, Tensor] = {}
    written = []
    for i in range(num_parts):
        part = load_partition(root, i)
        groups = part.node_feats.items() if part.is_hetero else [(None, part.node_feats)]
        for group, nf in groups:
            y = nf.get("feats", {}).get("y")
            if y is None:
                continue
            if group not in labels:
                n = part.node_map[group].numel() if part.is_hetero else part.node_map.numel()
                labels[group] = torch.zeros((n, *y.shape[1:]), dtype=y.dtype)
            labels[group][nf["global_id"].long()] = y
        for split in SPLITS:
            seeds = part.seeds.get(split)
            if seeds is None or (isinstance(seeds, dict) and not seeds):
                continue
            seeds = _one_or_dict(seeds) if isinstance(seeds, dict) else seeds
            torch_save_atomic(seeds, split_file(root, split, i))
            written.append(split_file(root, split, i))
    if labels:
        torch_save_atomic(_one_or_dict(labels), label_file(root))
        written.append(label_file(root))
    return written


class Partitioner:
    """PyG's `Partitioner`: METIS-partition a Data / HeteroData into `num_parts` parts at
    `root` (`recursive`: multilevel recursive bisection instead of k-way)."""

    def __init__(self, data: Any, num_parts: int, root: str, recursive: bool = False) -> None:
        from torch_geometric.data import Data, HeteroData

        if not isinstance(data, (Data, HeteroData)):
            raise TypeError(f"data: expected Data or HeteroData, got {type(data).__name__}")
        if not isinstance(num_parts, int) or num_parts < 1:
            raise ValueError(f"num_parts={num_parts!r}: pass a positive integer")
        self.data, self.num_parts, self.root, self.recursive = data, num_parts, root, recursive
        self.is_hetero = isinstance(data, HeteroData)
        self.node_types = data.node_types if self.is_hetero else None
        self.edge_types = data.edge_types if self.is_hetero else None

    @property
    def is_node_level_time(self) -> bool:
        """PyG's: the graph has node times (`time` on nodes)."""
        if "time" not in self.data:
            return False
        if self.is_hetero:
            return any("time" in store for store in self.data.node_stores)
        return bool(self.data.is_node_attr("time"))

    @property
    def is_edge_level_time(self) -> bool:
        """PyG's: the graph has edge times (`edge_time`, or `time` on edges)."""
        if "edge_time" in self.data:
            return True
        if "time" not in self.data:
            return False
        if self.is_hetero:
            return any("time" in store for store in self.data.edge_stores)
        return bool(self.data.is_edge_attr("time"))

    def generate_partition(self) -> None:
        """Write the partition (an existing identical one is reused; a different one is
        refused, naming the folder: remove it or choose another root)."""
        from app.partition.writer import partition_graph

        partition_graph(self.data, self.root, self.num_parts, recursive=self.recursive)


def load_partition_info(root_dir: str | os.PathLike, partition_idx: int) -> tuple:
    """PyG's `load_partition_info`: (meta, num_partitions, partition_idx, node_pb, edge_pb) of
    the partition at `root_dir`; the node books are PyG's id → part tensors (range books of
    relabelled partitions stay books), per type on a heterogeneous graph."""
    from app.partition.book import pyg_book
    from app.partition.reader import load_partition_book, map_files, read_meta, torch_load

    root = Path(root_dir)
    meta = read_meta(root)
    num_parts = int(meta["num_parts"])
    if not 0 <= partition_idx < num_parts:
        raise ValueError(f"partition_idx={partition_idx}: {root} has parts 0..{num_parts - 1}")
    edge_pb = {t: torch_load(root / rel) for t, rel in map_files(meta, "edge_map").items()}
    if meta["is_hetero"]:
        node_pb: Any = {t: pyg_book(load_partition_book(root, t)) for t in meta["node_types"]}
        return meta, num_parts, partition_idx, node_pb, edge_pb
    return meta, num_parts, partition_idx, pyg_book(load_partition_book(root)), edge_pb[None]
