"""Local (single-machine) loaders and the SamplerOutput → mini-batch conversion they share with
the distributed loader (`batch`).

The exports load on first use (`app.entrypoint.lazy_exports`): the distributed sampler imports
`batch` alone, and a sampler process must not import the local loaders with it (issue 38).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.entrypoint import lazy_exports, type_checking_exports

if TYPE_CHECKING:  # the exports: their types for mypy and IDEs, and the table below
    from app.loader.batch import LocalGather as LocalGather
    from app.loader.batch import to_data as to_data
    from app.loader.batch import to_hetero_data as to_hetero_data
    from app.loader.link_loader import LinkNeighborLoader as LinkNeighborLoader
    from app.loader.node_loader import NeighborLoader as NeighborLoader

_EXPORTS = type_checking_exports(__file__)  # the block above, read once
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
