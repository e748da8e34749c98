"""Neighbour sampling: CSC layout (`csc`), numba kernels (`kernel`), multi-hop driver and the
local `NeighborSampler` (`neighbor`). The distributed sampler reuses the driver with its own hop
function.

The exports load on first use (PEP 562): a sampler process imports `app.sampler.kernel`, which
runs this file, and must not import the local sampler's PyG types with it (issue 38).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.entrypoint import lazy_exports, type_checking_exports

if TYPE_CHECKING:  # the exports: their types for mypy and IDEs, and the table below
    from app.sampler.csc import to_csc as to_csc
    from app.sampler.kernel import Relabeler as Relabeler
    from app.sampler.kernel import neighbor_sample as neighbor_sample
    from app.sampler.kernel import sample_hop as sample_hop
    from app.sampler.neighbor import NeighborSampler as NeighborSampler
    from app.sampler.neighbor import local_hop_fn as local_hop_fn
    from app.sampler.neighbor import sample_multi_hop as sample_multi_hop
    from app.sampler.neighbor import sample_multi_hop_hetero as sample_multi_hop_hetero

_EXPORTS = type_checking_exports(__file__)  # the block above, read once
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
