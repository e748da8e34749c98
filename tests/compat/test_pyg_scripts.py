"""PyG-style scripts run on this package with only their imports changed (issue 14).

`partition_graph.py`, `node_sage.py` and `link_sage.py` are written from PyG's documentation
(hand-launched, `--node_rank 0/1` on 127.0.0.1, PyG's argument names and positional calls).
Each case partitions a tiny graph, starts both ranks as real processes, and requires: both
train to the end and exit 0, nothing at exit (no traceback, no TensorPipe `eof`), no Python
`UserWarning` (torch warns inside `rpc.init_rpc`; `app.distributed.rpc` hides that one), and no
process of either rank's session left behind (the loader's own sampler processes included).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.ports import free_ports

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TIMEOUT_S = 300

pytestmark = pytest.mark.dist


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """Both tiny graphs partitioned in two, as PyG's partition script does."""
    spec = importlib.util.spec_from_file_location("pyg_partition", HERE / "partition_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("pyg")
    for dataset in ("homo", "hetero"):
        module.partition_dataset(dataset, str(out), 2)
    return out


def _session_members(sid: int) -> list[str]:
    """Processes still in session `sid` (a rank and everything it started)."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            left.append(stat.parent.name)
    return left


def run_ranks(script: str, *args: str) -> list[str]:
    """Start rank 0 and 1 of `script`, wait (bounded), return their outputs; fail on a nonzero
    exit, an error at exit, or a process left in either rank's session."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / script), "--node_rank", str(r), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )  # fmt: skip
        for r in (0, 1)
    ]
    deadline, outs = time.monotonic() + TIMEOUT_S, []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    for rank, (p, out) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, f"rank {rank} exited {p.returncode}:\n{out[-4000:]}"
        assert "training done" in out, f"rank {rank} did not finish:\n{out[-4000:]}"
        for bad in ("Traceback", "eof", "could not find destination", "UserWarning"):
            assert bad not in out, f"rank {rank} printed {bad!r}:\n{out[-4000:]}"
    time.sleep(0.5)
    for rank, p in enumerate(procs):
        left = _session_members(p.pid)
        if left:
            os.killpg(p.pid, 9)
        assert not left, f"rank {rank} left processes behind: {left}"
    return outs


def _node_args(root: Path, dataset: str, workers: int) -> list[str]:
    ddp, train, test = free_ports(3)
    return ["--dataset", dataset, "--dataset_root_dir", str(root), "--num_nodes", "2",
            "--ddp_port", str(ddp), "--train_loader_port", str(train),
            "--test_loader_port", str(test), "--num_workers", str(workers)]  # fmt: skip


@pytest.mark.parametrize(("dataset", "workers"), [("hetero", 0)])
def test_node_classification(root, dataset, workers):
    outs = run_ranks("node_sage.py", *_node_args(root, dataset, workers))
    for rank, out in enumerate(outs):
        assert f"[node {rank}] epoch 0: loss" in out


@pytest.mark.parametrize(("dataset", "workers"), [("homo", 0), ("hetero", 2)])
def test_link_prediction(root, dataset, workers):
    ddp, port = free_ports(2)
    outs = run_ranks("link_sage.py", "--dataset", dataset, "--dataset_root_dir", str(root),
                     "--ddp_port", str(ddp), "--train_loader_port", str(port),
                     "--num_workers", str(workers))  # fmt: skip
    for rank, out in enumerate(outs):
        assert f"[node {rank}] epoch 0: loss" in out


def test_done_when_four_workers(root):
    """The issue's "Done when" (and the homogeneous node case): PyG's example default of 4
    sampler processes per trainer, started and stopped by the loaders themselves."""
    outs = run_ranks("node_sage.py", *_node_args(root, "homo", 4))
    for rank, out in enumerate(outs):
        assert out.count(f"sampler{rank}-0-") >= 4, f"rank {rank}: no 4 samplers:\n{out}"
        assert out.count("exiting (clean)") == 4, f"rank {rank}: unclean sampler exit:\n{out}"


def test_script_without_main_guard(root):
    """Sampler processes are forks of the script (as PyG's workers), not spawned copies that
    import the script again: a script with no `__main__` guard runs."""
    (port,) = free_ports(1)
    outs = run_ranks("no_main_guard.py", "--dataset_root_dir", str(root), "--port", str(port))
    for rank, out in enumerate(outs):
        seen, total = out.split(f"[node {rank}] ")[1].split(" seeds of ")
        assert int(seen) == int(total.split()[0]) > 0
