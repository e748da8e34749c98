"""`bench.first_eval` on the CPU at a toy scale: every phase is timed inside the evaluation's
wall, the kept buffers are counted where they live, and `bench.gpu` runs it per workload."""

from __future__ import annotations

import json

import pytest

from app.inference import layerwise, view
from bench import first_eval, gpu


def test_the_phases_of_a_first_evaluation_add_up(tmp_path, monkeypatch):
    for module, name in ((view, "_csr"), (layerwise, "_plan"), (layerwise, "_to")):
        monkeypatch.setattr(module, name, getattr(module, name))  # restored after `instrument`
    for cls in (layerwise._Buffers, layerwise._Table, layerwise._Projections):
        for name in ("empty", "put"):
            if name in vars(cls):
                monkeypatch.setattr(cls, name, vars(cls)[name])
    monkeypatch.setattr(layerwise._Run, "_device_edges", layerwise._Run._device_edges)
    out = tmp_path / "results.json"
    monkeypatch.setattr("bench.common.RESULTS", out)
    first_eval.main(["3000", f"--root={tmp_path}", "--tag=t", "--sampler=none"])
    got = {
        r["metric"].removeprefix("t_3000n_2x128_cpu_"): r["value"]
        for r in json.loads(out.read_text())
    }
    for which in ("first", "later"):
        phases = [got.get(f"{which}_{p}_s", 0.0) for p in (*first_eval.PHASES, "rest")]
        assert got[f"{which}_s"] > 0 and got[f"{which}_rest_s"] > 0
        assert sum(phases) - got.get(f"{which}_view_csr_s", 0.0) == pytest.approx(
            got[f"{which}_s"],
            abs=1e-5,  # records keep 6 decimals
        )
    assert got["first_view_s"] >= got["first_view_csr_s"] > 0 and "later_view_s" not in got
    # SAGE 2x128 into 47 classes: two 48-column projections per node, and one chunk's scratch
    assert got["kept_buffer_bytes_host"] == 4 * (3000 * 2 * 48 + 3000 * 128)
    first_eval.main(["3000", f"--root={tmp_path}", "--tag=job", "--layers=3"])  # a job's loader
    metrics = {r["metric"] for r in json.loads(out.read_text())}
    assert "job_3000n_3x128_cpu_first_view_s" in metrics  # the view reuses the loader's CSC:
    assert "job_3000n_3x128_cpu_first_view_csr_s" not in metrics  # it builds none


def test_an_unknown_option_is_one_line():
    with pytest.raises(SystemExit, match="unknown option '--chunk=5'"):
        first_eval._args(["--chunk=5"])


def test_bench_gpu_runs_it_with_each_workloads_model(monkeypatch):
    ran = []
    monkeypatch.setattr(gpu.subprocess, "run", lambda cmd, **kw: ran.append(cmd) or
                        gpu.subprocess.CompletedProcess(cmd, 0, "first_eval x\n", ""))  # fmt: skip
    for name, (_, extra) in gpu.WORKLOADS.items():
        gpu._first_eval(name, extra, 1000, 8)
    assert [c[c.index("--layers=2") if "--layers=2" in c else c.index("--layers=3") :][:2]
            for c in ran] == [["--layers=2", "--hidden=128"], ["--layers=3", "--hidden=256"]]  # fmt: skip
    assert all("--device=cuda" in c and "--sampler=cuda" in c for c in ran)
