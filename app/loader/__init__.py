"""Local (single-machine) loaders and the SamplerOutput → mini-batch conversion they share with
the distributed loader (`batch`).

The exports load on first use (`app.entrypoint.lazy_exports`): the distributed sampler imports
`batch` alone, and a sampler process must not import the local loaders with it (issue 38).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.entrypoint import lazy_exports

if TYPE_CHECKING:  # the exports' types, for mypy and readers
    from app.loader.batch import LocalGather as LocalGather
    from app.loader.batch import to_data as to_data
    from app.loader.batch import to_hetero_data as to_hetero_data
    from app.loader.link_loader import LinkNeighborLoader as LinkNeighborLoader
    from app.loader.node_loader import NeighborLoader as NeighborLoader

_EXPORTS = {
    "LinkNeighborLoader": "app.loader.link_loader",
    "LocalGather": "app.loader.batch",
    "NeighborLoader": "app.loader.node_loader",
    "to_data": "app.loader.batch",
    "to_hetero_data": "app.loader.batch",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
