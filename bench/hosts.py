"""The cost of the link: the e2e job across 2 and 3 testbed hosts, unshaped and shaped.

    python -m bench.hosts [num_nodes] [steps] [hosts,...] [rates,...]
    # default: 200000 nodes, 10 steps, hosts 2,3, rates none,25gbit,10gbit,1gbit

Each host is a network namespace of `app.testbed` (own PID namespace and /dev/shm) on a
bridge, its egress shaped with `tbf`; one launcher per host, started from SLURM's variables
(`cluster=env`). The job is `bench.e2e`'s (synthetic products graph, fan-out [15,10,5], batch
1024, GraphSAGE 3x256, sampling on threads inside each trainer), two epochs capped at `steps`
batches, figures from the second. Side by side in the same run: the same job with the same
number of nodes on 127.0.0.1 (`cluster=local`, no link at all), the reference of every ratio.

Per (hosts, rate): epoch time and its ratio to the loopback run, data wait, and where the
bytes go: each host's bytes on the wire per batch (interface counters) next to the job's own
counts of remote feature bytes and hop (sampling request/response) bytes per batch.

Projection: from the bytes on the wire per batch measured at H hosts, a host's bytes per batch
on N machines is scaled by the remote share of its neighbourhoods, (N-1)/N over (H-1)/H (an
even cut; METIS does better), and the time those bytes take on a link of R Gbit/s is set
against the measured loopback step time: `wire_ms = bytes * 8 / R`, `bound = 1 + wire / step`
(no overlap of transfer and compute; an upper bound).

Needs root and network namespaces; elsewhere it prints why and records nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app.testbed.net import Testbed, TestbedError, check_support, parse_rate
from bench.common import record
from bench.e2e import job_overrides

BENCH = "hosts"
BASE_PORT = 29500
MODEL = ["sampler.num_neighbors=[15,10,5]", "sampler.concurrency=2", "model.num_layers=3",
         "model.hidden_channels=256"]  # fmt: skip
PROJECT_NODES = (2, 4, 8, 16)
PROJECT_GBIT = (10, 25, 100)
REPO = Path(__file__).resolve().parents[1]


def overrides(out: Path, num_nodes: int, steps: int, hosts: int) -> list[str]:
    return [*job_overrides(out, num_nodes, steps, hosts, 0), *MODEL]


def app_cmd(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "app", *args]


def run_local(out: Path, num_nodes: int, steps: int, hosts: int) -> dict[str, float]:
    """The job on 127.0.0.1 (`cluster=local`): the reference."""
    job = out / f"local-{hosts}"
    args = [*overrides(out, num_nodes, steps, hosts), f"hydra.run.dir={job}"]
    subprocess.run(app_cmd(args), cwd=REPO, check=True, capture_output=True)
    return json.loads((job / "result.json").read_text())


def run_hosts(tb: Testbed, out: Path, num_nodes: int, steps: int, tag: str) -> dict[str, float]:
    """The job across the testbed's hosts, one launcher per host from SLURM's variables."""
    job = out / f"hosts-{tag}"
    args = [*overrides(out, num_nodes, steps, tb.hosts), "cluster=env",
            "cluster.allow_remote=true", f"cluster.master_port={BASE_PORT}", f"hydra.run.dir={job}"]  # fmt: skip
    procs = []
    for i in range(tb.hosts):
        env = {**os.environ, "SLURM_NODEID": str(i), "SLURM_NNODES": str(tb.hosts),
               "SLURM_LAUNCH_NODE_IPADDR": tb.addr(0), "SLURM_JOB_ID": f"bench-{tag}"}  # fmt: skip
        log = open(out / f"hosts-{tag}-node{i}.log", "w")  # noqa: SIM115 (closed below)
        procs.append((subprocess.Popen(tb.host_cmd(i, app_cmd(args)), cwd=REPO, env=env,
                                       stdout=log, stderr=subprocess.STDOUT), log))  # fmt: skip
    codes = []
    for proc, log in procs:
        codes.append(proc.wait())
        log.close()
    if any(codes):
        raise RuntimeError(f"hosts-{tag}: exit codes {codes}; logs in {out}")
    return json.loads((job / "result.json").read_text())


def report(hosts: int, rate: str, res: dict[str, float], ref: dict[str, float]) -> None:
    tag = f"{hosts}hosts_{rate}"
    record(BENCH, f"epoch_time_{tag}_s", res["epoch_time_s"], "s", f"{hosts} nodes on loopback",
           res["epoch_time_s"] / ref["epoch_time_s"])  # fmt: skip
    record(BENCH, f"data_wait_frac_{tag}", res["data_wait_frac"], "fraction")
    sent = max(res[f"wire_sent_bytes_per_batch_h{i}"] for i in range(hosts))
    record(BENCH, f"wire_sent_bytes_per_batch_max_host_{tag}", sent, "bytes")
    record(BENCH, f"feature_bytes_per_batch_{tag}", res["remote_feature_bytes_per_batch"], "bytes")
    record(BENCH, f"hop_bytes_per_batch_{tag}", res["hop_bytes_per_batch"], "bytes")


def projection(hosts: int, wire_bytes: float, step_s: float) -> None:
    """The table of the module docstring, printed and recorded."""
    print(f"\nprojection from {hosts} hosts: {wire_bytes:,.0f} B/batch/host, step {step_s:.3f} s")
    print(f"{'machines':>8} " + " ".join(f"{g:>4} Gbit/s: ms, bound" for g in PROJECT_GBIT))
    share = (hosts - 1) / hosts
    for n in PROJECT_NODES:
        b = wire_bytes * ((n - 1) / n) / share
        cells = []
        for g in PROJECT_GBIT:
            wire_s = b * 8 / (g * 1e9)
            cells.append(f"{wire_s * 1e3:>12.2f}, {1 + wire_s / step_s:>5.2f}x")
            record(BENCH, f"projected_wire_ms_{n}machines_{g}gbit_from{hosts}", wire_s * 1e3, "ms")
        print(f"{n:>8} " + " ".join(cells))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    num_nodes = int(argv[0]) if len(argv) > 0 else 200_000
    steps = int(argv[1]) if len(argv) > 1 else 10
    host_counts = [int(h) for h in argv[2].split(",")] if len(argv) > 2 else [2, 3]
    rates = argv[3].split(",") if len(argv) > 3 else ["none", "25gbit", "10gbit", "1gbit"]
    try:
        check_support()
        [parse_rate(r) for r in rates]
    except TestbedError as err:
        print(f"bench.hosts skipped: {err}")
        return
    out = Path(os.environ.get("DISTGNN_BENCH_HOSTS_DIR") or tempfile.mkdtemp(prefix="bench-hosts-"))
    for hosts in host_counts:
        subprocess.run(app_cmd(["task=partition", *overrides(out, num_nodes, steps, hosts)]),
                       cwd=REPO, check=True, capture_output=True)  # fmt: skip
        ref = run_local(out, num_nodes, steps, hosts)
        record(BENCH, f"epoch_time_{hosts}nodes_loopback_s", ref["epoch_time_s"], "s")
        tb = Testbed(hosts=hosts, prefix="dgbench")
        try:
            for rate in rates:
                tb.up(rate)
                start = time.perf_counter()
                res = run_hosts(tb, out, num_nodes, steps, f"{hosts}-{rate}")
                print(f"  {hosts} hosts at {rate}: job {time.perf_counter() - start:.0f} s")
                report(hosts, rate, res, ref)
                if rate == rates[0]:
                    wire = max(res[f"wire_sent_bytes_per_batch_h{i}"] for i in range(hosts))
                    step_s = ref["epoch_time_s"] / (ref["steps"] / hosts)
                    projection(hosts, wire, step_s)
        finally:
            tb.down()


if __name__ == "__main__":
    main()
