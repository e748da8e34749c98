"""Step 2 of the data path: cut the graph into one part per cluster node, and load a part back.

- `assign`: node → part (METIS via pymetis, or seeded random).
- `order`: the locality order of a part's nodes (`partition.order=locality`, with relabelling).
- `stream`: `partition.method=stream`, the same layout from a chunked on-disk graph
  (`app.dataset.chunked`) under `partition.memory_budget_gb`, for graphs too big for METIS.
- `writer`: `partition_graph` writes PyG's `Partitioner` layout (+ checksums, seeds, CSC
  pointers, halos, optional relabelling); its docstring documents the on-disk format.
- `reader`: `read_meta` / `load_partition` validate and memory-map one part.
- `book`: which part owns a node id (dict map, or id ranges after relabelling).
- `pyg`: PyG's `Partitioner`, and the label / split files PyG's scripts read beside a partition.
- `spec`: `PartitionSpec`, the part of the config that determines a partition and its folder.
- `task`: `ensure_partition` (reuse or create) and `task=partition`.
"""

import importlib
from typing import Any

from app.partition.book import DictPartitionBook, PartitionBook, RangePartitionBook
from app.partition.reader import (
    FORMAT_VERSION,
    PartitionData,
    PartitionError,
    load_partition,
    load_partition_book,
    read_meta,
)

# Heavy modules (pymetis, numba) load only when these are first used: `from app.partition
# import partition_graph` works, but a trainer that merely loads a part never imports them.
_LAZY = {
    "PartitionMeta": "app.partition.writer",
    "partition_graph": "app.partition.writer",
    "stats_for_logging": "app.partition.writer",
    "ensure_partition": "app.partition.task",
    "partition_root": "app.partition.task",
    "run_partition_task": "app.partition.task",
    "stream_partition": "app.partition.stream",
    "Partitioner": "app.partition.pyg",
    "write_side_files": "app.partition.pyg",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'app.partition' has no attribute {name!r}")


__all__ = [
    *_LAZY,
    "FORMAT_VERSION",
    "DictPartitionBook",
    "PartitionBook",
    "PartitionData",
    "PartitionError",
    "RangePartitionBook",
    "load_partition",
    "load_partition_book",
    "read_meta",
]
