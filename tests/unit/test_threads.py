"""Thread budgets: the cores a job may use, less other work's load, shared by its processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.threads import available_cores, per_process, quota_cores
from tests.helpers.jobs import REPO


def test_cgroup_quota_in_cores(tmp_path):
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("150000 100000\n")
    assert quota_cores(cpu_max) == 1.5
    cpu_max.write_text("max 100000\n")
    assert quota_cores(cpu_max) is None
    assert quota_cores(tmp_path / "absent") is None


def test_load_of_other_work_leaves_fewer_cores_never_none():
    cores = len(os.sched_getaffinity(0))
    quota = quota_cores()
    idle = available_cores(load=0.0)
    assert idle == (min(cores, max(1, int(quota))) if quota else cores)
    assert available_cores(load=1.0) == max(1, idle - 1)
    assert available_cores(load=10 * cores) == 1  # a machine busy many times over: one thread


def test_processes_share_the_cores():
    assert per_process(1, cores=8) == 8
    assert per_process(3, cores=8) == 2
    assert per_process(16, cores=8) == 1


@pytest.mark.dist
def test_one_process_job_sizes_its_pools_and_user_setting_wins():
    code = (
        "import logging, torch; logging.basicConfig(level=logging.INFO)\n"
        "from app.threads import budget_this_process\n"
        "n = budget_this_process(); assert torch.get_num_threads() == n, n; print(n)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    run = [sys.executable, "-c", code]
    auto = subprocess.run(run, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert auto.returncode == 0, auto.stderr
    assert 1 <= int(auto.stdout) <= len(os.sched_getaffinity(0))
    assert "threads: " in auto.stderr and "load" in auto.stderr
    env["OMP_NUM_THREADS"] = "3"
    user = subprocess.run(run, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert user.returncode == 0 and user.stdout.strip() == "3", user.stderr
