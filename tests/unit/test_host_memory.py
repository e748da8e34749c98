"""The per-host memory estimate before spawn: its terms, and the one line that refuses a job."""

from __future__ import annotations

import math
import os

import pytest

from app.config import ConfigError
from app.dataset import load_dataset
from app.launch.limits import check_host_memory, estimate_hosts, sampled_nodes
from app.launch.pss import PssMonitor, process_pss
from app.partition.writer import partition_graph

GIB = 2**30


def refusal(cfg, available_gib: float, root=None) -> str:
    with pytest.raises(ConfigError) as err:
        check_host_memory(cfg, root, available=int(available_gib * GIB))
    line = str(err.value)
    assert "\n" not in line
    return line


def test_papers_tenth_refused_naming_the_partition_and_its_fixes(compose):
    cfg = compose("+experiment=papers_homo")
    hosts = estimate_hosts(cfg)
    assert len(hosts) == 4
    h = hosts[0]
    assert max(h.terms().values()) == h.partition  # 2.8M nodes x 128 features, 80M in-edges
    assert 2 * GIB < h.partition < 5 * GIB
    line = refusal(cfg, 8)
    assert line.startswith("dataset=synthetic_papers (num_nodes=11100000) on cluster.num_nodes=4")
    assert "4 hosts on this machine need about" in line and "8.0 GiB is available" in line
    assert line.endswith(
        "the biggest term is partition: use more hosts (cluster.num_nodes=8) or "
        "dataset.feature_dtype=float16"
    )
    narrow = estimate_hosts(compose("+experiment=papers_homo", "dataset.feature_dtype=float16"))
    assert h.partition - narrow[0].partition == 2_775_000 * 128 * 2  # 2 bytes less per value
    check_host_memory(cfg, available=64 * GIB)  # fits a bigger machine: no error


def test_env_mode_checks_one_host(compose):
    cfg = compose("+experiment=papers_homo", "cluster=env")
    one = max(h.total for h in estimate_hosts(cfg))
    check_host_memory(cfg, available=int(one) + 1)  # local mode would need 4 of them
    assert "a host needs about" in refusal(cfg, one / GIB - 0.2)


@pytest.mark.parametrize(
    "overrides,fix",
    [
        (
            [
                "dataset.num_features=4096",
                "sampler.feature_cache_size=1000000",
                "sampler.num_neighbors=[2,1,1]",
            ],
            "the biggest term is cache: use a smaller sampler.feature_cache_size (now 1000000)",
        ),
        (
            ["train.eval_mode=layerwise", "model.hidden_channels=16384"],
            "the biggest term is evaluation tables: use train.eval_mode=sampled (sampled evaluation "
            "of the val/test nodes)",
        ),
        (
            ["dataset.num_features=1024"],
            "the biggest term is batches: use smaller batches (loader.batch_size=1024, "
            "loader.eval_batch_size=1024) or fewer sampler.num_neighbors ([15, 10, 5])",
        ),
        (
            ["dataset.num_nodes=20000", "loader.num_workers=8"],
            "the biggest term is 9 processes: use fewer processes per host "
            "(loader.num_workers=8, cluster.procs_per_node=1)",
        ),
    ],
)
def test_the_biggest_term_names_its_fix(compose, overrides, fix):
    cfg = compose(
        "+experiment=papers_homo", "dataset.num_nodes=100000", "dataset.num_features=16",
        *overrides,
    )  # fmt: skip
    assert refusal(cfg, 0.5).endswith(fix)


def test_batches_term_is_the_ring_and_the_float32_copies_of_the_largest_batch(compose):
    """The term the 1/10 papers run measured missing (a trainer OOM-killed at the start of
    evaluation, whose batches were 4x the training ones): sampled nodes of the largest batch,
    in `sampler.concurrency` + 2 shared-memory slots, and 2 float32 copies on the trainer."""
    cfg = compose("+experiment=papers_homo", "dataset.feature_dtype=float16")
    draws = 1024 * (1 + 15 + 15 * 10 + 15 * 10 * 5)
    nodes = sampled_nodes(cfg, 1024, 11_100_000)
    assert nodes == round(11_100_000 * (1 - math.exp(-draws / 11_100_000)))
    assert 0.95 * draws < nodes < draws  # few repeats in a big graph
    assert 630_000 < sampled_nodes(cfg, 1024, 1_110_000) < 640_000  # many in a small one
    assert 499_000 < sampled_nodes(cfg, 8192, 500_000) <= 500_000  # never more than the graph
    h = estimate_hosts(cfg)[0]
    assert h.batches == 4 * nodes * (128 * 2 + 32) + 2 * nodes * 128 * 4
    wide = estimate_hosts(compose("+experiment=papers_homo", "loader.eval_batch_size=4096"))[0]
    assert wide.batches > 3 * estimate_hosts(compose("+experiment=papers_homo"))[0].batches
    every = compose("+experiment=papers_homo", "sampler.num_neighbors=[10,-1,5]")
    assert sampled_nodes(every, 1024, 11_100_000) == 11_100_000
    inline = compose("+experiment=papers_homo", "loader.num_workers=0")  # no sampler: no ring
    assert estimate_hosts(inline)[0].batches == 2 * nodes * 128 * 4


def test_measured_from_a_written_partition(compose, tmp_path):
    cfg = compose(
        "+experiment=smoke", "cluster.num_nodes=2", f"dataset.root={tmp_path}",
        "train.eval_mode=layerwise",
    )  # fmt: skip
    data = load_dataset(cfg.dataset, seed=0)
    root = tmp_path / "P"
    meta = partition_graph(data, root, 2, fingerprint="mem")
    hosts = estimate_hosts(cfg, root)
    node_map = (root / "node_map.pt").stat().st_size
    for p, h in enumerate(hosts):
        files = sum(f.stat().st_size for f in (root / f"part_{p}").glob("*.pt"))
        assert h.partition == files + node_map
        stats = meta.stats["parts"][p]
        assert h.halo == 16 * stats["halo"]
        assert h.cache == min(cfg.sampler.feature_cache_size, stats["halo"]) * 16 * 4
        assert h.eval_tables == 2 * stats["nodes"] * 32 * 4  # widest: hidden_channels=32
    assert "the biggest term is 1 processes" in refusal(cfg, 0.1, root)


def test_pss_monitor_counts_this_process():
    """`process_pss` reads psutil's PSS; the monitor keeps each host's peak (metrics keys)."""
    own = process_pss(os.getpid(), recursive=False)
    assert 50 << 20 < own < 8 * GIB  # an interpreter with torch imported
    monitor = PssMonitor(interval_s=0.05)
    monitor.add(1, os.getpid(), recursive=False)
    with monitor:
        ballast = b"\x01" * (300 << 20)  # written: resident, counted in PSS
        monitor.sample()
    del ballast
    metrics = monitor.metrics()
    assert set(metrics) == {"peak_pss_gib", "peak_pss_gib/host1"}
    assert metrics["peak_pss_gib"] == metrics["peak_pss_gib/host1"]
    assert metrics["peak_pss_gib"] * GIB > own + (250 << 20)
