"""Distributed sampling on a STREAM partition (`partition.method=stream`) over real processes
and real RPC: the graph goes through the chunked on-disk format and the streaming partitioner,
and every trainer's seeded distributed sample still equals the single-machine sample id for id
(the checks of `test_dist_sampling.py`, unchanged)."""

from __future__ import annotations

import pytest
from torch_geometric.data import Data

from app.dataset.chunked import ChunkedGraph, write_data
from app.partition.stream import stream_partition
from tests.helpers.dist_procs import run_checks

pytestmark = pytest.mark.dist


# 3 parts without sampler processes: the same path again (test_dist_sampling runs 3 parts)
@pytest.mark.parametrize(
    "num_parts,num_workers", [(2, 1), pytest.param(3, 0, marks=pytest.mark.long)]
)
def test_stream_partition_equals_local_sampling(tmp_path, homo_graph, num_parts, num_workers):
    g = homo_graph
    data = Data(x=g["x"], y=g["y"], edge_index=g["edge_index"], num_nodes=g["x"].size(0))
    chunked = ChunkedGraph(write_data(data, tmp_path / "chunked", chunk_edges=1000))
    meta = stream_partition(
        chunked, tmp_path / "part", num_parts, params={"method": "stream"},
        fingerprint="stream-test", dataset_fingerprint="homo",
    )  # fmt: skip
    assert meta.method == "stream" and meta.stats["edge_cut_frac"] < 0.5
    run_checks(tmp_path, homo_graph, num_parts, num_workers, "check_homo")
