"""Peak memory per host of a running job: the summed PSS of every job process on it.

PSS (proportional set size) splits each shared page between the processes mapping it, so the
sum over a host's processes is what the job costs that host (RSS would count torch's libraries
and a memory-mapped partition once per process). The launcher samples its children (and their
descendants) on a thread while `run_procs` runs; the launcher itself counts on its own host.
The peaks go to `result.json` and the job's MLflow run as `peak_pss_gib` (the largest host) and
`peak_pss_gib/host<i>`, and to `peak_pss-<node rank>.json` in the job dir.
"""

from __future__ import annotations

import threading
from collections import defaultdict

import psutil

GIB = 2**30
INTERVAL_S = 0.5


def process_pss(pid: int, recursive: bool = True) -> int:
    """PSS bytes of `pid` (and of its descendants), 0 once it is gone."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)] if recursive else [proc]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_full_info().pss
        except psutil.Error:  # exited between listing and reading
            pass
    return total


class PssMonitor:
    """Samples each host's summed PSS every `interval_s` on a daemon thread; keeps the peak."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._pids: dict[int, list[tuple[int, bool]]] = defaultdict(list)
        self.peak: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pss-monitor", daemon=True)

    def add(self, host: int, pid: int, recursive: bool = True) -> None:
        """Count `pid` (with its descendants unless not `recursive`) on `host`."""
        with self._lock:
            self._pids[host].append((pid, recursive))
        self.sample()

    def sample(self) -> None:
        with self._lock:
            hosts = {h: list(pids) for h, pids in self._pids.items()}
        for host, pids in hosts.items():
            now = sum(process_pss(pid, rec) for pid, rec in pids)
            with self._lock:
                self.peak[host] = max(self.peak.get(host, 0), now)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> PssMonitor:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def metrics(self) -> dict[str, float]:
        """`peak_pss_gib` (the largest host) and `peak_pss_gib/host<i>`; {} before any sample."""
        with self._lock:
            peak = dict(self.peak)
        if not peak:
            return {}
        out = {f"peak_pss_gib/host{h}": v / GIB for h, v in sorted(peak.items())}
        return {"peak_pss_gib": max(peak.values()) / GIB, **out}
