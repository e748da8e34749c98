"""What a distributed loader cuts into batches, as records: seed nodes or seed links.

Each record knows how many inputs it holds and turns a batch's input positions and seed into
the `BatchRequest` a sampler serves (`sample_batch` / `sample_edges`), so the engine needs no
branch per kind of loader.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from app.distributed.sampler import DistNeighborSampler
from app.sampler.output import SampledBatch

EdgeType = tuple[str, str, str]
_SEED_MASK = 0x7FFFFFFFFFFF  # torch.Generator seeds: non-negative, below 2**63


@dataclass(frozen=True)
class NodeBatch:
    """Seed nodes (global ids), their input positions and, temporal, their times."""

    seeds: Tensor
    input_id: Tensor
    input_type: str | None
    seed: int
    seed_time: Tensor | None
    endpoint = "sample_batch"

    def wire(self) -> tuple[Any, ...]:
        return (self.seeds, self.input_id, self.input_type, self.seed, self.seed_time)

    def run(self, sampler: DistNeighborSampler, alloc: Any = None) -> SampledBatch:
        return sampler.sample_batch(
            self.seeds, self.input_id, self.input_type, self.seed, alloc, self.seed_time
        )


@dataclass(frozen=True)
class LinkBatch:
    """Positive links plus their negatives (`LinkInputs.batch`), in `mode`."""

    batch: dict[str, Any]
    mode: str
    seed: int
    endpoint = "sample_edges"

    def wire(self) -> tuple[Any, ...]:
        return (self.batch, self.mode, self.seed)

    def run(self, sampler: DistNeighborSampler, alloc: Any = None) -> SampledBatch:
        return sampler.sample_edges(self.batch, self.mode, self.seed, alloc)


@dataclass(frozen=True)
class NodeInputs:
    """Seed nodes: global ids of `input_type` (None: homogeneous), with one time per seed
    under temporal sampling (`time`, None otherwise)."""

    ids: Tensor
    input_type: str | None = None
    time: Tensor | None = None

    def __post_init__(self) -> None:
        if self.time is not None and self.time.shape != self.ids.shape:
            raise ValueError(
                f"input_time has shape {tuple(self.time.shape)} for {self.ids.numel()} input "
                "nodes: pass one time per input node"
            )

    @property
    def num_inputs(self) -> int:
        return int(self.ids.numel())

    @property
    def label_key(self) -> str | None:
        """Whose labels a lone whole-graph label tensor holds: the input node type's."""
        return self.input_type

    def request(self, index: Tensor, seed: int) -> NodeBatch:
        times = None if self.time is None else self.time[index]
        return NodeBatch(self.ids[index], index, self.input_type, seed, times)


@dataclass(frozen=True)
class LinkInputs:
    """Seed links `edges` ([2, E] global ids) of `edge_type` (None: homogeneous) with their
    labels, and the negatives to draw: `mode` binary (`ratio` per positive, label 0) or
    triplet (`ratio` destinations per positive), uniform over `num_src` / `num_dst` nodes.
    `time` (temporal sampling): one time per link, PyG's `edge_label_time`.

    Negatives are drawn here, in the trainer, seeded per batch, so every sampler process
    sees complete, reproducible batches."""

    edges: Tensor
    edge_type: EdgeType | None
    num_src: int
    num_dst: int
    label: Tensor | None = None
    mode: str = "binary"
    ratio: float = 0.0
    time: Tensor | None = None

    def __post_init__(self) -> None:
        num = int(self.edges.size(1))
        for name, given in (("edge_label", self.label), ("edge_label_time", self.time)):
            if given is not None and given.size(0) != num:
                raise ValueError(
                    f"{name} has {given.size(0)} entries for {num} links in edge_label_index: "
                    "pass one per link"
                )
        if self.mode not in ("binary", "triplet"):
            raise ValueError(f"neg_sampling={self.mode!r}: expected binary, triplet or None")
        if self.mode == "triplet" and self.ratio != int(self.ratio):
            raise ValueError(f"neg_sampling_ratio={self.ratio}: triplet mode needs an integer")

    @property
    def label_key(self) -> EdgeType | None:
        """Whose labels a lone whole-graph label tensor holds: on a heterogeneous graph the
        link edge type's (per-edge labels, PyG's rule), else the nodes' (homogeneous)."""
        return self.edge_type

    @property
    def num_inputs(self) -> int:
        return int(self.edges.size(1))

    def batch(self, index: Tensor, seed: int) -> dict[str, Any]:
        """Positives of `index` plus seeded uniform negatives, as sent to a sampler."""
        src, dst = self.edges[:, index]
        gen = torch.Generator().manual_seed(seed & _SEED_MASK)
        n = index.numel()
        out: dict[str, Any] = {"input_id": index}
        if self.edge_type is not None:
            out["edge_type"] = self.edge_type
        if self.time is not None:
            out["time"] = self.time[index]
        if self.mode == "triplet":
            r = int(self.ratio)
            out.update(src=src, dst=dst, dst_neg=torch.randint(self.num_dst, (n, r), generator=gen))
            return out
        label = torch.ones(n) if self.label is None else self.label[index]
        k = round(self.ratio * n)
        neg_src = torch.randint(self.num_src, (k,), generator=gen)
        neg_dst = torch.randint(self.num_dst, (k,), generator=gen)
        out.update(
            src=torch.cat([src, neg_src]),
            dst=torch.cat([dst, neg_dst]),
            edge_label=torch.cat([label, label.new_zeros(k)]),
        )
        return out

    def request(self, index: Tensor, seed: int) -> LinkBatch:
        return LinkBatch(self.batch(index, seed), self.mode, seed)


Inputs = NodeInputs | LinkInputs
