"""Bytes on the wire: what each host's network interfaces sent and received, per batch.

The kernel's interface counters (psutil's view of `/proc/net/dev`, loopback left out) of the
machine a trainer runs on, read before and after each epoch's training and evaluation. They
count every byte the machine moved, the job's and anything else's, which is what a link
carries. Only jobs whose master address is not a loopback one (a job across machines) are
metered: on one machine, the job's traffic never reaches an interface.

Per epoch, for each host `h<i>` (cluster node i): `wire_sent_bytes_per_batch_h<i>`,
`wire_recv_bytes_per_batch_h<i>` (training bytes / that host's batches: the job's batches
over the hosts), `wire_sent_bytes_per_eval_h<i>`, `wire_recv_bytes_per_eval_h<i>` (one
evaluation pass), and `wire_bytes_per_batch` (all hosts' sent bytes / the job's batches).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.netutil import is_loopback_ip
from app.runtime import Runtime
from app.task.metrics import all_reduce

Counters = tuple[float, float]  # (bytes sent, bytes received) since boot


def read_counters() -> Counters:
    """This machine's bytes sent and received over its non-loopback interfaces."""
    import psutil

    sent = recv = 0.0
    for name, c in psutil.net_io_counters(pernic=True).items():
        if name != "lo" and not name.startswith("lo:"):
            sent, recv = sent + c.bytes_sent, recv + c.bytes_recv
    return sent, recv


@dataclass(frozen=True)
class WireMeter:
    """Per-host byte counts of a job across machines; one trainer per host reads them."""

    node_rank: int
    num_nodes: int
    reads: bool  # this trainer reports its host's counters (local rank 0)

    @classmethod
    def for_job(cls) -> WireMeter | None:
        """The meter of this trainer's job, None outside a job across machines."""
        try:
            rt = Runtime.from_env()
        except RuntimeError:  # not started by the launcher (a plain single-process run)
            return None
        if is_loopback_ip(rt.master_addr):
            return None
        return cls(rt.node_rank, rt.num_nodes, rt.local_rank == 0)

    def read(self) -> Counters:
        return read_counters() if self.reads else (0.0, 0.0)

    def metrics(self, phase: str, start: Counters, end: Counters, per: float) -> dict[str, float]:
        """`wire_{sent,recv}_bytes_per_<phase>_h<i>` for every host, each host's bytes
        between `start` and `end` divided by `per`. Collective: every trainer calls it."""
        slots = [0.0] * (2 * self.num_nodes)
        slots[2 * self.node_rank] = end[0] - start[0]
        slots[2 * self.node_rank + 1] = end[1] - start[1]
        totals = all_reduce(slots)
        per = max(per, 1.0)
        out: dict[str, float] = {}
        for i in range(self.num_nodes):
            out[f"wire_sent_bytes_per_{phase}_h{i}"] = totals[2 * i] / per
            out[f"wire_recv_bytes_per_{phase}_h{i}"] = totals[2 * i + 1] / per
        if phase == "batch":
            out["wire_bytes_per_batch"] = sum(totals[0::2]) / per / self.num_nodes
        return out
