"""Distributed sampling over real processes and real RPC on 127.0.0.1 (the core proof).

Each test partitions a small graph (METIS for homogeneous graphs), starts one trainer per part
(plus sampler processes when `num_workers` > 0), and the trainers compare every batch against
the unpartitioned graph: with the same seed the distributed sample equals the single-machine
kernel's sample id for id (full and finite fan-out, disjoint too), every edge exists, fan-outs
hold, features and labels are the originals; link batches hold real positives and the
configured negatives; hetero full fan-out equals a BFS per node and edge type; the halo cache of
the hottest remote nodes holds the rows a remote fetch returns.
"""

from __future__ import annotations

import pytest

from tests.helpers.dist_graphs import hetero_graph, write_hetero, write_homo
from tests.helpers.dist_procs import run_checks

pytestmark = pytest.mark.dist


# halo feature cache: partial (40 rows: hits and remote fetches in one batch) and off; batches
# in flight (sampler.concurrency): 2, and a window of 6 whose hops and remote feature fetches
# overlap, so the window's depth changes no batch (each equals the local sample, in order)
@pytest.mark.parametrize("num_parts,num_workers,cache,depth", [(2, 1, 40, 2), (3, 0, 0, 6)])
def test_homo_equals_local_sampling(tmp_path, homo_graph, num_parts, num_workers, cache, depth):
    write_homo(
        tmp_path / "part", homo_graph["edge_index"], homo_graph["x"], homo_graph["y"], num_parts
    )
    run_checks(
        tmp_path, homo_graph, num_parts, num_workers, "check_homo", cache=cache, concurrency=depth
    )


def test_hetero_equals_bfs(tmp_path):
    graph = hetero_graph()
    write_hetero(tmp_path / "part", graph, 2)
    run_checks(tmp_path, graph, 2, 0, "check_hetero")


@pytest.mark.long  # its own 2-process job
def test_hot_node_cache_returns_the_rows_a_remote_fetch_does(tmp_path, homo_graph):
    """The halo cache (40 rows) and, beside it, the hot cache (`sampler.hot_cache_bytes`: 30
    rows of x and y) hold the rows a remote fetch returns."""
    write_homo(tmp_path / "part", homo_graph["edge_index"], homo_graph["x"], homo_graph["y"], 2)
    row = homo_graph["x"][0].numel() * homo_graph["x"].element_size() + 8  # x and int64 y
    run_checks(tmp_path, homo_graph, 2, 0, "check_cache", cache=40, hot=30 * row)
