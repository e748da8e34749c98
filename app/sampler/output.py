"""What the distributed sampler hands its trainer: plain tensors in typed records, no PyG.

A sampler process imports no torch_geometric (issue 38: PyG alone is a large share of its
fixed memory), so it returns these instead of PyG's `SamplerOutput` / `Data`, and the trainer
builds the mini-batch from them (`app.loader.batch.assemble`). `Sample` has the fields of
PyG's `SamplerOutput` / `HeteroSamplerOutput` (dicts by node / edge type when heterogeneous),
so `to_data` / `to_hetero_data` read either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from torch import Tensor

LinkMode = Literal["binary", "triplet"] | None
Attrs = dict[str, Tensor]
SLOT = "resident_slot"  # batch key: each node's row in its trainer's device table (0: carried)
MISS = "resident_miss"  # batch key: positions of the nodes whose rows the batch carries


@dataclass
class Sample:
    """A multi-hop sample: sampled nodes (global ids), edges (local `row` → `col`, global
    `edge` ids), disjoint tree ids (`batch`), per-hop counts and the loader's `metadata`.
    Homogeneous: tensors and lists; heterogeneous: the same by node / edge type."""

    # Tensor (list[int] for the counts) when homogeneous; {node / edge type: that} otherwise
    node: Any
    row: Any
    col: Any
    edge: Any
    batch: Any = None
    num_sampled_nodes: Any = None
    num_sampled_edges: Any = None
    metadata: Any = None


@dataclass
class SampledBatch:
    """A sample with its gathered attributes: what one batch request returns.

    `node_attrs` / `edge_attrs`: {name: rows} (homogeneous) or {node / edge type: {name:
    rows}} (heterogeneous), rows in the order of `sample.node` / `sample.edge`. `input_type`:
    the seed node or edge type (heterogeneous); `link`: False for node batches, else the link
    layout ("binary" / None, or "triplet"). `resident`: each node's row in its trainer's device
    table (`app.distributed.resident`), -1 for the nodes whose rows `node_attrs` carries (in
    order; the others' rows are on the trainer's device); None: `node_attrs` carries every row.
    """

    sample: Sample
    hetero: bool
    node_attrs: dict[Any, Any] = field(default_factory=dict)
    edge_attrs: dict[Any, Any] = field(default_factory=dict)
    input_type: Any = None
    link: LinkMode | bool = False
    resident: Tensor | None = None

    def node_tables(self) -> list[Attrs]:
        """Every {name: rows} table of node attributes (one per node type): the feature rows
        a shared-memory slot carries (`app.distributed.shm`)."""
        return list(self.node_attrs.values()) if self.hetero else [self.node_attrs]
