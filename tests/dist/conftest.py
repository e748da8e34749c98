"""Fixtures for the distributed tests: an id-encoded graph (tests/helpers/dist_graphs.py)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.dist_graphs import NUM_CLASSES, node_features, random_graph


@pytest.fixture
def homo_graph() -> dict:
    n = 600
    return {
        "edge_index": random_graph(n, 6, seed=1),
        "x": node_features(n),
        "y": torch.arange(n) % NUM_CLASSES,
    }
