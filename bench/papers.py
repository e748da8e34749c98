"""ogbn-papers100M's shape at 1/10 on 4 testbed hosts: generation, stream partition, the job.

    make bench-papers                  # = python -m bench.papers (needs root: app.testbed)
    python -m bench.papers --nodes 1110000 --hosts 4 --steps 50
    python -m bench.papers --local ... # the job on 127.0.0.1 (cluster=local), no testbed

`+experiment=papers_homo` (synthetic_papers, 11.1M nodes, GraphSAGE [15,10,5], partition=stream)
in three phases, each a fresh process, timed, its peak RSS read from the kernel (`wait4`):

1. generation: the chunked graph, written straight to disk (`app.partition.task.ensure_chunked`);
2. stream partition: `python -m app task=partition` (reads the chunks of phase 1);
3. the job, 1 epoch + evaluation: one launcher per testbed host (`cluster=env` from SLURM's
   variables, as `bench.hosts`), or `cluster=local` with `--local`. Its `result.json` and each
   host's `peak_pss-<i>.json` give epoch and evaluation time, data wait, bytes per batch (the
   job's counts; on the testbed also each interface's), test accuracy and per-host peak PSS.
   The machine's used memory (psutil) is sampled meanwhile: the goal is never above 20 GiB.

Output: records in `outputs/bench/results.json` and the section between the `bench-papers`
markers of `docs/benchmarks.md` (replaced, or appended once): the measured table and a
projection to the whole papers100M (`projection`) on 8 and 16 machines.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from app.config import Config, compose_config
from app.launch.limits import HostMemory, available_bytes, estimate_hosts
from app.testbed.net import DEFAULT_SUBNET
from bench.common import record

BENCH = "papers"
REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench-papers: begin -->", "<!-- bench-papers: end -->"
FULL_NODES = 111_059_956  # ogbn-papers100M
PROJECT_MACHINES = (8, 16)
PROJECT_GBIT = (10, 25, 100)
BASE_PORT = 29500
GIB = 2**30


@dataclass
class Phase:
    """A phase's wall time and its process's peak RSS (the kernel's maxrss of the child)."""

    seconds: float
    peak_rss_gib: float


def run_phase(cmd: list[str], log: Path, env: dict | None = None) -> Phase:
    """Run `cmd` to completion (output to `log`); its wall time and peak RSS."""
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        tail = log.read_text()[-1500:]
        raise RuntimeError(f"{' '.join(cmd[:4])}... exit {proc.returncode}; {log}:\n{tail}")
    return Phase(time.perf_counter() - start, usage.ru_maxrss * 1024 / GIB)


def overrides(out: Path, nodes: int, hosts: int, steps: int, dtype: str = "float32") -> list[str]:
    return [
        "+experiment=papers_homo", f"dataset.num_nodes={nodes}", f"cluster.num_nodes={hosts}",
        f"dataset.feature_dtype={dtype}",
        f"output_dir={out}", f"dataset.root={out}/data", "train.epochs=1",
        f"train.max_steps_per_epoch={steps}", "train.checkpoint=false",
        f"mlflow.tracking_uri=sqlite:///{out}/mlflow.db",
    ]  # fmt: skip


def app_cmd(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "app", *args]


def generate(out: Path, args: list[str]) -> Phase:
    """Phase 1 in a fresh process: the experiment's chunked graph (`ensure_chunked`)."""
    code = (
        "import sys\nfrom app.config import compose_config\n"
        "from app.partition.spec import PartitionSpec\n"
        "from app.partition.task import ensure_chunked\n"
        "print(ensure_chunked(PartitionSpec.from_config(compose_config(sys.argv[1:]))))"
    )
    return run_phase([sys.executable, "-c", code, *args], out / "generate.log")


@dataclass(frozen=True)
class NetNames:
    """The testbed's names (`<prefix>-h<i>`) and private subnet (`app.testbed.net.Testbed`)."""

    prefix: str = "dgpapers"
    subnet: str = DEFAULT_SUBNET


class MachineMemory:
    """The machine's peak used memory (total - available), sampled on a thread."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)

    def _run(self, interval_s: float) -> None:
        while True:
            vm = psutil.virtual_memory()
            self.peak = max(self.peak, vm.total - vm.available)
            if self._stop.wait(interval_s):
                return

    def __enter__(self) -> MachineMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def run_job_local(out: Path, args: list[str]) -> Phase:
    return run_phase(app_cmd([*args, f"hydra.run.dir={out / 'job'}"]), out / "job.log")


def run_job_testbed(out: Path, args: list[str], hosts: int, rate: str, net: NetNames) -> Phase:
    """One launcher per testbed host (cluster=env from SLURM's variables), as `bench.hosts`,
    on the testbed named `net.prefix` over `net.subnet` (another run's testbed may hold the
    defaults); it is torn down whatever happens."""
    from app.testbed.net import Testbed

    tb = Testbed(hosts=hosts, prefix=net.prefix, subnet=net.subnet)
    job_args = [*args, "cluster=env", "cluster.allow_remote=true",
                f"cluster.master_port={BASE_PORT}", f"hydra.run.dir={out / 'job'}"]  # fmt: skip
    start = time.perf_counter()
    try:
        tb.up(rate)
        procs = []
        for i in range(hosts):
            env = {**os.environ, "SLURM_NODEID": str(i), "SLURM_NNODES": str(hosts),
                   "SLURM_LAUNCH_NODE_IPADDR": tb.addr(0), "SLURM_JOB_ID": "bench-papers"}  # fmt: skip
            log = open(out / f"job-node{i}.log", "w")  # noqa: SIM115 (closed below)
            cmd = tb.host_cmd(i, app_cmd(job_args))
            procs.append((subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log,
                                           stderr=subprocess.STDOUT), log))  # fmt: skip
        codes = []
        for proc, log in procs:
            codes.append(proc.wait())
            log.close()
    finally:
        tb.down()
    if any(codes):
        raise RuntimeError(f"bench.papers job: exit codes {codes}; logs in {out}")
    return Phase(time.perf_counter() - start, 0.0)


def job_figures(job: Path, hosts: int) -> dict[str, float]:
    """The job's result (node 0's) with every host's peak PSS from `peak_pss-<i>.json`."""
    result = json.loads((job / "result.json").read_text())
    for path in sorted(job.glob("peak_pss-*.json")):
        result |= {k: v for k, v in json.loads(path.read_text()).items() if "/" in k}
    per_host = [result.get(f"peak_pss_gib/host{i}", 0.0) for i in range(hosts)]
    result["peak_pss_gib"] = max(per_host)
    return result


def part_bytes(partition: Path, hosts: int) -> list[int]:
    """Each part's files on disk (what a host maps)."""
    return [sum(f.stat().st_size for f in (partition / f"part_{p}").glob("*.pt")) for p in
            range(hosts)]  # fmt: skip


def projection(
    measured: dict[str, float], nodes: int, hosts: int, fixed_gib: float
) -> list[dict[str, float]]:
    """The whole papers100M on each of PROJECT_MACHINES machines, from the measured figures.

    Linear: a host's data (its part, halo, cache rows) with nodes per host, i.e. by
    `scale * hosts / machines`; generation and partition time with the edges (`scale`).
    Not linear: the per-process fixed cost (constant per host); the partitioner's O(N) arrays
    (one process, all nodes: its peak grows with `scale`, not divided by machines); bytes per
    batch depend on the fan-out, not on the graph, only on the remote share of a host's
    neighbourhoods, (M-1)/M against the measured (H-1)/H (an even cut; METIS-like cuts less).
    """
    scale = FULL_NODES / nodes
    rows = []
    for m in PROJECT_MACHINES:
        data = max(measured["peak_pss_gib"] - fixed_gib, 0.0) * scale * hosts / m
        share = ((m - 1) / m) / ((hosts - 1) / hosts) if hosts > 1 else 1.0
        wire = measured["bytes_per_batch"] * share
        row = {
            "machines": m,
            "host_memory_gib": fixed_gib + data,
            "partition_bytes_gib": measured["part_gib"] * scale * hosts / m,
            "generation_s": measured["generation_s"] * scale,
            "partition_s": measured["partition_s"] * scale,
            "partition_peak_gib": measured["partition_peak_gib"] * scale,
            "bytes_per_batch": wire,
        }
        for g in PROJECT_GBIT:
            row[f"wire_ms_{g}gbit"] = wire * 8 / (g * 1e9) * 1e3
        rows.append(row)
    return rows


def markdown(
    measured: dict[str, float],
    rows: list[dict[str, float]],
    how: str,
    nodes: int = FULL_NODES // 10,
) -> str:
    """The section written to docs/benchmarks.md."""
    m = measured
    lines = [
        BEGIN,
        f"## papers100M's shape at 1/{round(FULL_NODES / nodes)} on testbed hosts "
        "(`make bench-papers`)",
        "",
        how,
        "",
        "| phase | time | peak | goal |",
        "|---|---|---|---|",
        f"| generation | {m['generation_s']:.0f} s | {m['generation_peak_gib']:.2f} GiB RSS | "
        "≤ 300 s |",
        f"| stream partition | {m['partition_s']:.0f} s | {m['partition_peak_gib']:.2f} GiB RSS "
        "| ≤ 1200 s |",
        f"| 1 epoch + evaluation | {m['epoch_time_s'] + m['eval_time_s']:.0f} s (epoch "
        f"{m['epoch_time_s']:.0f} s, evaluation {m['eval_time_s']:.0f} s) | per host "
        f"{m['peak_pss_gib']:.2f} GiB PSS (estimate {m['estimate_gib']:.2f} GiB; part "
        f"{m['part_gib']:.2f} GiB on disk) | ≤ 600 s; "
        "PSS ≤ 1.3 × part + 0.8 GiB |",
        f"| machine | | {m['machine_peak_gib']:.1f} GiB used | ≤ 20 GiB |",
        "",
        f"Data wait {m['data_wait_frac']:.1%} of the epoch, {m['bytes_per_batch']:,.0f} bytes "
        f"per batch per host on the wire, test accuracy {m['test_acc']:.3f}.",
        "",
        "Projection to ogbn-papers100M (111M nodes) from these figures (`bench.papers."
        "projection`: a host's data and the times scale linearly; the fixed cost per process "
        "and bytes per batch do not; the partitioner's peak is one process over all nodes):",
        "",
        "| machines | memory per host | part on disk | generation | partition (peak) | "
        + " | ".join(f"wire ms/batch at {g} Gbit/s" for g in PROJECT_GBIT)
        + " |",
        "|---" * (5 + len(PROJECT_GBIT)) + "|",
    ]
    for r in rows:
        wire = " | ".join(f"{r[f'wire_ms_{g}gbit']:.2f}" for g in PROJECT_GBIT)
        lines.append(
            f"| {r['machines']:.0f} | {r['host_memory_gib']:.1f} GiB | "
            f"{r['partition_bytes_gib']:.1f} GiB | {r['generation_s'] / 60:.0f} min | "
            f"{r['partition_s'] / 60:.0f} min ({r['partition_peak_gib']:.0f} GiB) | {wire} |"
        )
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_section(path: Path, text: str) -> None:
    """Replace the text between the markers in `path` (append it the first time)."""
    doc = path.read_text() if path.exists() else ""
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        doc = head + text.rstrip("\n") + rest.split(END, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    path.write_text(doc)


def check_fits(cfg: Config, partition: Path) -> list[HostMemory]:
    """The hosts' estimates (`app.launch.limits`, from the written parts); refused in one line
    when their sum exceeds what this machine has available: every testbed host runs here,
    while each launcher checks only its own host, as on separate machines."""
    hosts = estimate_hosts(cfg, partition)
    need, have = sum(h.total for h in hosts), available_bytes()
    if need > have:
        worst = max(hosts, key=lambda h: h.total)
        terms = ", ".join(f"{k} {v / GIB:.1f}" for k, v in worst.terms().items() if v)
        raise SystemExit(
            f"bench.papers: {len(hosts)} hosts need about {need / GIB:.1f} GiB together but "
            f"{have / GIB:.1f} GiB is available (a host, GiB: {terms}); use a smaller --nodes "
            "or fewer --hosts"
        )
    return hosts


def net_flags(net: NetNames) -> str:
    """The command line's testbed options where they differ from the defaults."""
    flags = [(f"--testbed-{k}", v) for k, v in vars(net).items() if v != getattr(NetNames, k)]
    return "".join(f" {flag} {value}" for flag, value in flags)


def record_phase(name: str, phase: Phase) -> None:
    """A finished phase's figures, recorded at once (a later phase may fail or be stopped)."""
    record(BENCH, f"{name}_s", phase.seconds, "s")
    record(BENCH, f"{name}_peak_gib", phase.peak_rss_gib, "GiB")


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=11_100_000)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--steps", type=int, default=0, help="batches per epoch (0: all)")
    parser.add_argument("--rate", default="none", help="testbed link shaping (tbf), e.g. 10gbit")
    parser.add_argument("--local", action="store_true", help="cluster=local, no testbed")
    parser.add_argument(
        "--testbed-prefix",
        default=NetNames.prefix,
        help="testbed names <prefix>-h<i>: differ from any other testbed up",
    )
    parser.add_argument(
        "--testbed-subnet",
        default=NetNames.subnet,
        help="testbed's private /24: differ from any other testbed up",
    )
    parser.add_argument("--feature-dtype", default="float16", choices=("float16", "float32"))
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "bench" / "papers")
    parser.add_argument("--docs", type=Path, default=DOCS)
    a = parser.parse_args(argv)
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    args = overrides(out, a.nodes, a.hosts, a.steps, a.feature_dtype)
    gen = generate(out, args)
    record_phase("generation", gen)
    part = run_phase(app_cmd(["task=partition", *args]), out / "partition.log")
    record_phase("partition", part)
    net = NetNames(a.testbed_prefix, a.testbed_subnet)
    partition = next(p for p in (out / "partitions").iterdir() if (p / "META.json").is_file())
    job_cfg = compose_config(args if a.local else [*args, "cluster=env"])  # env: + a launcher
    hosts = check_fits(job_cfg, partition)
    with MachineMemory() as machine:
        if a.local:
            job = run_job_local(out, args)
        else:
            job = run_job_testbed(out, args, a.hosts, a.rate, net)
    res = job_figures(out / "job", a.hosts)
    parts = part_bytes(partition, a.hosts)
    wire = [res.get(f"wire_sent_bytes_per_batch_h{i}", 0.0) for i in range(a.hosts)]
    measured = {
        "generation_s": gen.seconds, "generation_peak_gib": gen.peak_rss_gib,
        "partition_s": part.seconds, "partition_peak_gib": part.peak_rss_gib,
        "epoch_time_s": res["epoch_time_s"], "eval_time_s": res.get("eval_time_s", 0.0),
        "data_wait_frac": res["data_wait_frac"], "test_acc": res["test_acc"],
        "peak_pss_gib": res["peak_pss_gib"], "part_gib": max(parts) / GIB,
        "estimate_gib": max(h.total for h in hosts) / GIB,
        "bytes_per_batch": max(wire) or res["remote_feature_bytes_per_batch"]
        + res["hop_bytes_per_batch"],
        "machine_peak_gib": machine.peak / GIB, "job_s": job.seconds,
    }  # fmt: skip
    for key, value in measured.items():
        record(BENCH, key, value, "s" if key.endswith("_s") else "")
    fixed = (hosts[0].processes + hosts[0].batches) / GIB  # what does not grow with the graph
    where = "127.0.0.1 (cluster=local)" if a.local else f"{a.hosts} testbed hosts (rate {a.rate})"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    flags = " --local" if a.local else net_flags(net)
    how = (
        f"- Command: `python -m bench.papers --nodes {a.nodes} --hosts {a.hosts} --steps "
        f"{a.steps} --feature-dtype {a.feature_dtype}{flags}`, on {where}.\n"
        f"- Machine: {os.cpu_count()} cores, {psutil.virtual_memory().total / GIB:.0f} GiB. "
        f"Date: {time.strftime('%Y-%m-%d')}. Commit: `{commit}`."
    )
    rows = projection(measured, a.nodes, a.hosts, fixed)
    write_section(a.docs, markdown(measured, rows, how, a.nodes))
    return measured


if __name__ == "__main__":
    main()
