"""`bench.papers` end to end at 20k nodes on 127.0.0.1: generation, stream partition, the job,
its figures and the docs section (the 1/10 run needs the testbed and many minutes)."""

from __future__ import annotations

import json

import pytest

import bench.common
from bench.papers import BEGIN, main

pytestmark = [pytest.mark.dist, pytest.mark.long]  # three phases, a 2-node job


def test_bench_papers_tiny_local(tmp_path, monkeypatch):
    monkeypatch.setattr(bench.common, "RESULTS", tmp_path / "results.json")
    docs = tmp_path / "benchmarks.md"
    measured = main(["--nodes", "20000", "--hosts", "2", "--local", "--out", str(tmp_path / "o"),
                     "--docs", str(docs)])  # fmt: skip
    assert (tmp_path / "o" / "data").is_dir()
    assert measured["generation_s"] > 0 and 0.05 < measured["generation_peak_gib"] < 4
    assert measured["partition_s"] > 0 and 0.05 < measured["partition_peak_gib"] < 4
    assert 0.1 < measured["peak_pss_gib"] < 8 and measured["part_gib"] > 0
    # bytes per batch: 0 here, where the halo cache holds every remote row
    assert measured["bytes_per_batch"] >= 0 and 0 <= measured["test_acc"] <= 1
    assert measured["machine_peak_gib"] > 0
    names = {r["metric"] for r in json.loads((tmp_path / "results.json").read_text())}
    assert {"generation_s", "partition_s", "peak_pss_gib", "epoch_time_s"} <= names
    text = docs.read_text()
    assert (
        BEGIN in text
        and "--nodes 20000 --hosts 2 --steps 0 --feature-dtype float16 --local" in text
    )
    assert 0.5 < measured["estimate_gib"] < 4  # the pre-spawn estimate, beside the measured PSS
