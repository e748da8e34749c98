"""Local (single-machine) loaders and the SamplerOutput → mini-batch conversion they share with
the distributed loader (`batch`)."""

from app.loader.batch import LocalGather, to_data, to_hetero_data
from app.loader.link_loader import LinkNeighborLoader
from app.loader.node_loader import NeighborLoader

__all__ = ["LinkNeighborLoader", "LocalGather", "NeighborLoader", "to_data", "to_hetero_data"]
