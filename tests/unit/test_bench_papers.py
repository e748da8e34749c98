"""`make bench-papers`'s pieces that need no process: the projection, the table, the docs."""

from __future__ import annotations

import pytest

from bench.papers import (
    BEGIN,
    END,
    FULL_NODES,
    NetNames,
    markdown,
    net_flags,
    projection,
    write_section,
)

MEASURED = {
    "generation_s": 240.0, "generation_peak_gib": 3.0, "partition_s": 900.0,
    "partition_peak_gib": 7.5, "epoch_time_s": 300.0, "eval_time_s": 60.0,
    "data_wait_frac": 0.2, "test_acc": 0.5, "peak_pss_gib": 4.0, "part_gib": 3.0,
    "estimate_gib": 4.5,
    "bytes_per_batch": 30e6, "machine_peak_gib": 18.0, "job_s": 420.0,
}  # fmt: skip


def test_projection_scales_data_not_fixed_cost_or_fanout():
    rows = projection(MEASURED, FULL_NODES // 10, hosts=4, fixed_gib=1.0)
    assert [r["machines"] for r in rows] == [8, 16]
    eight, sixteen = rows
    # 3 GiB of data per host at 1/10 on 4 hosts: x10 data, /2 hosts -> 15 GiB, + the fixed 1
    assert eight["host_memory_gib"] == pytest.approx(1.0 + 3.0 * 10 * 4 / 8)
    assert sixteen["host_memory_gib"] == pytest.approx(1.0 + 3.0 * 10 * 4 / 16)
    assert eight["partition_bytes_gib"] == pytest.approx(15.0)
    assert eight["partition_s"] == pytest.approx(9000.0)  # linear in edges, machines apart
    assert eight["partition_peak_gib"] == sixteen["partition_peak_gib"] == pytest.approx(75.0)
    # bytes per batch: the fan-out's, only the remote share grows: (7/8) / (3/4)
    assert eight["bytes_per_batch"] == pytest.approx(30e6 * (7 / 8) / (3 / 4))
    assert eight["wire_ms_10gbit"] == pytest.approx(eight["bytes_per_batch"] * 8 / 1e10 * 1e3)
    assert eight["wire_ms_100gbit"] == pytest.approx(eight["wire_ms_10gbit"] / 10)


def test_section_replaced_between_markers(tmp_path):
    rows = projection(MEASURED, FULL_NODES // 10, hosts=4, fixed_gib=1.0)
    text = markdown(MEASURED, rows, "- Command: `python -m bench.papers`")
    assert text.startswith(BEGIN) and text.rstrip().endswith(END)
    assert "| generation | 240 s | 3.00 GiB RSS | ≤ 300 s |" in text
    assert "## papers100M's shape at 1/10 on testbed hosts" in text
    assert "(estimate 4.50 GiB; part 3.00 GiB on disk)" in text
    hundredth = markdown(MEASURED, rows, "", nodes=FULL_NODES // 100)
    assert "## papers100M's shape at 1/100 on testbed hosts" in hundredth
    assert "| 8 | 16.0 GiB | 15.0 GiB |" in text
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nbefore\n")
    write_section(doc, text)
    write_section(doc, text.replace("240 s", "250 s"))  # a rerun replaces its section
    got = doc.read_text()
    assert got.startswith("# Benchmarks\n\nbefore\n") and got.count(BEGIN) == 1
    assert "250 s" in got and "240 s" not in got


def test_testbed_flags_name_only_what_differs_from_the_defaults():
    assert net_flags(NetNames()) == ""
    other = NetNames(prefix="dgscale", subnet="10.214.0.0/24")
    assert net_flags(other) == " --testbed-prefix dgscale --testbed-subnet 10.214.0.0/24"
    assert net_flags(NetNames(prefix="dgscale")) == " --testbed-prefix dgscale"
