"""Neighbour sampling: CSC layout (`csc`), numba kernels (`kernel`), multi-hop driver and the
local `NeighborSampler` (`neighbor`). The distributed sampler reuses the driver with its own hop
function."""

from app.sampler.csc import to_csc
from app.sampler.kernel import Relabeler, neighbor_sample, sample_hop
from app.sampler.neighbor import (
    NeighborSampler,
    local_hop_fn,
    sample_multi_hop,
    sample_multi_hop_hetero,
)

__all__ = [
    "NeighborSampler",
    "Relabeler",
    "local_hop_fn",
    "neighbor_sample",
    "sample_hop",
    "sample_multi_hop",
    "sample_multi_hop_hetero",
    "to_csc",
]
