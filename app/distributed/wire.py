"""How ids and hop results travel between partitions: packed arrays in the narrowest safe width.

Ids on the wire are int32 when the job's id space allows it (every id < 2^31), else int64. The
width is fixed ONCE per store from the partition's global node / edge counts (`IdWire.of`), not
per message, so a message never switches width with its contents; an id space that needs int64
cannot be given int32 (`IdWire` refuses it in one line), and an id outside the space is refused
before it is narrowed (never silently wrapped).

A hop request carries every job's frontier concatenated in ONE array (seed times in one more),
with one small (edge type, fan-out, seed, length) record per job; its reply is three arrays
(neighbours, edge ids, counts) for all jobs. So a message holds a fixed number of tensors
whatever the fan-out or number of edge types, and its bytes are the ids themselves.

Feature rows travel in the store's dtype (a float16 store sends float16); rounding wider rows
to 16 bits in transit is an explicit opt-in (`sampler.feature_wire_dtype`, `narrow_rows`), and
the receiver writes them back into arrays of the store's dtype.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from app.distributed.routing import HopResult

_NUMPY = {torch.int32: np.int32, torch.int64: np.int64}
INT32_SPACE = 2**31  # ids 0 .. 2^31 - 1 fit int32
UNKNOWN = 2**63 - 1  # an id space nobody stated: int64

# (edge type or None, frontier global ids, fan-out, seed, seed time per frontier entry or None)
Job = tuple[Any, np.ndarray, int, int, np.ndarray | None]
HopRequest = tuple[list[tuple[Any, int, int, int]], Tensor, Tensor | None]
HopReply = tuple[Tensor, Tensor, Tensor]


def space_dtype(space: int) -> torch.dtype:
    """The narrowest integer type holding every id of a `space`-id space."""
    return torch.int32 if space <= INT32_SPACE else torch.int64


@dataclass(frozen=True)
class IdWire:
    """Integer widths of node and edge ids on the wire, from the global id spaces.

    `nodes` / `edges`: how many node / edge ids the whole graph has (the largest node type's
    count when heterogeneous). `node_dtype` / `edge_dtype` default to the narrowest that hold
    them; naming int32 for a space that needs int64 is refused.
    """

    nodes: int = UNKNOWN
    edges: int = UNKNOWN
    node_dtype: torch.dtype | None = None
    edge_dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        for what, space, key in (
            ("node", self.nodes, "node_dtype"),
            ("edge", self.edges, "edge_dtype"),
        ):
            want = getattr(self, key)
            if want is None:
                object.__setattr__(self, key, space_dtype(space))
            elif want == torch.int32 and space > INT32_SPACE:
                raise ValueError(
                    f"{what} ids as int32 on the wire: the graph has {space} {what} ids "
                    f"(> 2^31 = {INT32_SPACE}), which need int64; leave {key} unset"
                )
            elif want not in (torch.int32, torch.int64):
                raise ValueError(f"{key}={want}: ids travel as torch.int32 or torch.int64")

    @classmethod
    def of(cls, meta: Mapping[str, Any]) -> IdWire:
        """The widths of a partition from its META (`num_nodes`: an int, or a dict per node
        type; `num_edges`); a store without them (PyG's in-memory stores) sends int64."""
        nodes = meta.get("num_nodes")
        if isinstance(nodes, Mapping):
            nodes = max(nodes.values(), default=0)
        edges = meta.get("num_edges")
        return cls(
            int(nodes) if nodes is not None else UNKNOWN,
            int(edges) if edges is not None else UNKNOWN,
        )

    def nodes_out(self, ids: np.ndarray) -> Tensor:
        return _narrow(ids, self.node_dtype, self.nodes, "node")

    def edges_out(self, ids: np.ndarray) -> Tensor:
        return _narrow(ids, self.edge_dtype, self.edges, "edge")

    # -- hop request / reply --------------------------------------------------------------------

    def pack_request(self, jobs: Sequence[Job]) -> HopRequest:
        """Jobs → (per-job (edge type, fan-out, seed, frontier length), frontiers, times)."""
        heads = [(et, int(k), int(sd), int(f.size)) for et, f, k, sd, _ in jobs]
        front = self.nodes_out(_cat([f for _, f, _, _, _ in jobs]))
        timed = [t for *_, t in jobs if t is not None]
        if timed and len(timed) != len(jobs):
            raise ValueError("a hop request's jobs either all carry seed times or none does")
        times = torch.from_numpy(_cat(timed)) if timed else None
        return heads, front, times

    def pack_reply(self, results: Sequence[HopResult]) -> HopReply:
        """Every job's (neighbours, edge ids, counts) concatenated: three arrays."""
        nbrs = self.nodes_out(_cat([r[0] for r in results]))
        eids = self.edges_out(_cat([r[1] for r in results]))
        counts = _cat([r[2] for r in results])  # each <= a node's in-degree: fits edge ids
        return nbrs, eids, torch.from_numpy(counts.astype(_NUMPY[self.edge_dtype]))


def unpack_request(request: HopRequest) -> list[Job]:
    """A packed hop request → jobs with int64 frontiers (the sampler's dtype)."""
    heads, front, times = request
    ids = front.numpy().astype(np.int64, copy=False)
    t = None if times is None else times.numpy()
    jobs, start = [], 0
    for et, k, sd, n in heads:
        stop = start + n
        jobs.append((et, ids[start:stop], k, sd, None if t is None else t[start:stop]))
        start = stop
    return jobs


def unpack_reply(reply: HopReply, sizes: Sequence[int]) -> list[HopResult]:
    """A packed hop reply → per-job (neighbours, edge ids, counts) as int64; `sizes`: each
    job's frontier length, in request order."""
    nbrs, eids, counts = (t.numpy().astype(np.int64, copy=False) for t in reply)
    out, start, edge = [], 0, 0
    for n in sizes:
        c = counts[start : start + n]
        m = int(c.sum())
        out.append((nbrs[edge : edge + m], eids[edge : edge + m], c))
        start, edge = start + n, edge + m
    return out


FEATURE_WIRE = {"store": None, "float16": torch.float16, "bfloat16": torch.bfloat16}


def feature_dtype(name: str) -> torch.dtype | None:
    """The dtype a `sampler.feature_wire_dtype` name sends float rows in (None: as stored)."""
    if name not in FEATURE_WIRE:
        raise ValueError(
            f"feature_wire_dtype={name!r}: expected one of {', '.join(FEATURE_WIRE)} "
            "(store: as stored; float16 / bfloat16: round wider rows in transit)"
        )
    return FEATURE_WIRE[name]


def narrow_rows(rows: Tensor, name: str) -> Tensor:
    """`rows` as they travel under `feature_wire_dtype=name`: floats wider than 16 bits rounded
    to the named 16-bit type; 16-bit floats (never re-rounded) and integers as stored."""
    dtype = feature_dtype(name)
    if dtype is None or not rows.is_floating_point() or rows.element_size() <= 2:
        return rows
    return rows.to(dtype)


def rows_numpy(rows: Tensor) -> np.ndarray:
    """Received rows as numpy (bfloat16, which numpy lacks, widened to float32 first)."""
    return (rows.float() if rows.dtype == torch.bfloat16 else rows).numpy()


def nbytes(tensors: Sequence[Tensor | None]) -> int:
    """Payload bytes of a message's tensors."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _narrow(ids: np.ndarray, dtype: torch.dtype | None, space: int, what: str) -> Tensor:
    """`ids` as `dtype`; an id outside [0, space) is refused (it would wrap in int32)."""
    if dtype == torch.int32 and ids.size:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= space:
            raise ValueError(
                f"{what} id {hi if hi >= space else lo} is outside the graph's {space} {what} "
                "ids: the partition's META does not match the ids it serves; partition again"
            )
        return torch.from_numpy(ids.astype(np.int32))
    return torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64))


def _cat(chunks: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(chunks) if chunks else np.empty(0, np.int64)
