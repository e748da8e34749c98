"""Distributed sampling over real processes and real RPC on 127.0.0.1 (the core proof).

Each test partitions a small graph (METIS for homogeneous graphs), starts one trainer per part
(plus sampler processes when `num_workers` > 0), and the trainers compare every batch against
the unpartitioned graph: with the same seed the distributed sample equals the single-machine
kernel's sample id for id (full and finite fan-out, disjoint too), every edge exists, fan-outs
hold, features and labels are the originals; link batches hold real positives and the
configured negatives; hetero full fan-out equals a BFS per node and edge type.
"""

from __future__ import annotations

import pytest
import torch

from tests.dist._procs import Job, write_spec
from tests.dist.conftest import free_port, hetero_graph, write_hetero, write_homo

pytestmark = pytest.mark.dist
TIMEOUT_S = 150  # generous: the machine running CI may be heavily shared


def _run(tmp_path, graph, num_parts: int, num_workers: int, check: str, **extra) -> None:
    torch.save(graph, tmp_path / "graph.pt")
    spec = write_spec(
        tmp_path / "spec.json", root=str(tmp_path / "part"), graph=str(tmp_path / "graph.pt"),
        num_parts=num_parts, num_workers=num_workers, port=free_port(), dir=str(tmp_path),
        timeout=20.0, batch_size=64, check=check, **extra,
    )  # fmt: skip
    with Job(spec, num_parts, num_workers) as job:
        codes = job.wait(TIMEOUT_S)
        assert all(c == 0 for c in codes.values()), job.report()
        for p in range(num_parts):
            assert "CHECKS OK" in job.tail(f"trainer{p}-0"), job.report()


# halo feature cache: partial (40 rows: hits and remote fetches in one batch) and off
@pytest.mark.parametrize("num_parts,num_workers,cache", [(2, 1, 40), (3, 0, 0)])
def test_homo_equals_local_sampling(tmp_path, homo_graph, num_parts, num_workers, cache):
    write_homo(
        tmp_path / "part", homo_graph["edge_index"], homo_graph["x"], homo_graph["y"], num_parts
    )
    _run(tmp_path, homo_graph, num_parts, num_workers, "check_homo", cache=cache)


def test_hetero_equals_bfs(tmp_path):
    graph = hetero_graph()
    write_hetero(tmp_path / "part", graph, 2)
    _run(tmp_path, graph, 2, 0, "check_hetero")
