"""Partition books: which part owns a node id (DGL's Basic/Range partition books).

`DictPartitionBook` keeps the full node → part map (O(N) memory, O(1) per id).
`RangePartitionBook` applies when nodes were relabelled so that part p owns the contiguous ids
[bounds[p], bounds[p+1]): O(P) memory and O(log P) per id via `searchsorted`.
Both expose `partition_of(ids) -> Tensor` and `num_parts`, so callers never care which it is.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor


class PartitionBook(Protocol):
    num_parts: int

    def partition_of(self, ids: Tensor) -> Tensor: ...


class DictPartitionBook:
    """Node → part lookup through the stored map (`node_map.pt`)."""

    def __init__(self, node_map: Tensor, num_parts: int | None = None) -> None:
        self.node_map = node_map
        self.num_parts = int(num_parts if num_parts is not None else node_map.max().item() + 1)

    def partition_of(self, ids: Tensor) -> Tensor:
        return self.node_map[ids]

    def __len__(self) -> int:
        return self.node_map.numel()


class RangePartitionBook:
    """Node → part lookup for relabelled ids: part p owns [bounds[p], bounds[p+1])."""

    def __init__(self, bounds: Tensor | list[int]) -> None:
        self.bounds = torch.as_tensor(bounds, dtype=torch.int64)
        if self.bounds.numel() < 2 or bool((self.bounds[1:] < self.bounds[:-1]).any()):
            raise ValueError(f"bounds={self.bounds.tolist()}: need P+1 non-decreasing offsets")
        self.num_parts = self.bounds.numel() - 1

    def partition_of(self, ids: Tensor) -> Tensor:
        ids = torch.as_tensor(ids, dtype=torch.int64)
        return torch.searchsorted(self.bounds[1:], ids, right=True)

    def part_range(self, part: int) -> tuple[int, int]:
        """The [start, end) ids owned by `part`."""
        return int(self.bounds[part]), int(self.bounds[part + 1])

    def __len__(self) -> int:
        return int(self.bounds[-1])


def pyg_book(book: Any) -> Any:
    """PyG's form of a book (per type, for a dict of books): a dict book's id → part tensor,
    which PyG's stores and scripts index (`node_pb[ids]`, `.tolist()`); a range book (relabelled
    partitions, which PyG does not write) stays a book. Routing accepts both."""
    if isinstance(book, dict):
        return {k: pyg_book(v) for k, v in book.items()}
    return book.node_map if isinstance(book, DictPartitionBook) else book


def book_from_meta(meta: dict[str, Any], node_map: Any) -> PartitionBook | dict[str, PartitionBook]:
    """The right book(s) for a partition: range books when META.json has `node_bounds`."""
    num_parts = int(meta["num_parts"])
    bounds = meta.get("node_bounds")
    if not meta["is_hetero"]:
        return RangePartitionBook(bounds) if bounds else DictPartitionBook(node_map, num_parts)
    return {
        t: RangePartitionBook(bounds[t]) if bounds else DictPartitionBook(node_map[t], num_parts)
        for t in meta["node_types"]
    }


__all__ = [
    "DictPartitionBook",
    "PartitionBook",
    "RangePartitionBook",
    "book_from_meta",
]
