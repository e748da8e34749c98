"""Thread budgets: the cores a job may use on this machine, split among its processes there.

Every process of a job computes with torch's OpenMP pool and numba; each pool defaults to one
thread per core. On a machine busy with other work, threads that outnumber the free cores make
OpenMP's spinning barriers wait for descheduled peers, and an epoch slows down many times more
than the load grows (a one-process `mag_link` at load ~12 on 2 cores: 2 threads, epochs of
8-53 s; 1 thread, 2-3 s). So a job takes the cores this process may run on (its CPU affinity
and cgroup quota) minus what other work keeps busy (the 1-minute load average at its start),
at least one, and gives each of its N processes on the machine an equal share.
`OMP_NUM_THREADS` set by the user wins over the budget.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

log = logging.getLogger("distgnn")

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max <period>"


def quota_cores(path: Path = CGROUP_CPU_MAX) -> float | None:
    """The cgroup's CPU quota in cores, or None when unlimited or unknown."""
    try:
        quota, period = path.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def available_cores(load: float | None = None) -> int:
    """Cores this job may use: affinity, capped by the cgroup quota, less the `load` (default:
    the 1-minute load average) of other work; at least 1."""
    cores = len(os.sched_getaffinity(0))
    quota = quota_cores()
    if quota is not None:
        cores = min(cores, max(1, math.floor(quota)))
    busy = os.getloadavg()[0] if load is None else load
    return max(1, min(cores, math.floor(cores - busy + 0.5)))


def per_process(processes: int, cores: int | None = None) -> int:
    """Threads for each of `processes` processes of a job sharing this machine's `cores`."""
    return max(1, (cores or available_cores()) // max(1, processes))


def set_threads(threads: int) -> dict[str, int]:
    """Size this process's torch and numba pools; returns what was set."""
    import torch

    torch.set_num_threads(threads)
    out = {"torch_threads": threads}
    try:
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        out["numba_threads"] = numba.get_num_threads()
    except (ImportError, ValueError):  # numba absent, or its pool already fixed smaller
        pass
    return out


def budget_this_process() -> int:
    """The one-process path: this process is the whole job; `OMP_NUM_THREADS` wins if set."""
    user = os.environ.get("OMP_NUM_THREADS", "")
    threads = int(user) if user.isdigit() and int(user) > 0 else per_process(1)
    set_threads(threads)
    log.info(
        "threads: %d (%d cores, load %.1f%s)",
        threads,
        len(os.sched_getaffinity(0)),
        os.getloadavg()[0],
        ", OMP_NUM_THREADS" if user else "",
    )
    return threads
