"""Failures surface fast and clearly: a killed partition process, a port already in use.

The killed-process test runs a real 2-partition job (trainer + sampler process per part) with a
5 s RPC timeout, SIGKILLs partition 1's sampler mid-epoch, and checks that both trainers raise a
`PeerError` naming it within the timeout, that every process exits on its own, and that
no shared-memory ring slot of the job is left in /dev/shm.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from datetime import datetime

import pytest

from app.distributed import DistContext, RpcInitError, init_rpc
from app.distributed.shm import PREFIX, SHM_DIR
from tests.helpers.dist_graphs import write_homo
from tests.helpers.dist_procs import Job, write_spec
from tests.helpers.load import Budget, scaled
from tests.helpers.ports import free_port

pytestmark = pytest.mark.dist
RPC_TIMEOUT_S = 5.0


def _wait_for(paths, timeout: float, job: Job) -> None:
    budget = Budget(timeout)
    while not all(p.exists() for p in paths):
        if budget.left() <= 0:
            raise AssertionError(f"job never got going in {budget.describe()}:\n{job.report()}")
        time.sleep(0.1)


def _fault_spec(tmp_path, homo_graph):
    """A 2-partition job, one sampler process per trainer, running `check_fault`."""
    write_homo(tmp_path / "part", homo_graph["edge_index"], homo_graph["x"], homo_graph["y"], 2)
    return write_spec(
        tmp_path / "spec.json", root=str(tmp_path / "part"), graph="", num_parts=2, num_workers=1,
        port=free_port(), dir=str(tmp_path), timeout=RPC_TIMEOUT_S, batch_size=8, check="check_fault",
    )  # fmt: skip


def test_killed_partition_process_names_the_peer(tmp_path, homo_graph):
    spec = _fault_spec(tmp_path, homo_graph)
    with Job(spec, 2, 1) as job:
        _wait_for([tmp_path / f"ready_trainer{p}-0" for p in range(2)], 90, job)
        job.procs["sampler1-0-0"].kill()
        killed_at = time.time()
        codes = job.wait(3 * RPC_TIMEOUT_S + 20)  # every process exits by itself
    for p in range(2):
        assert codes[f"trainer{p}-0"] == 3, job.report()
        err = json.loads((tmp_path / f"error_trainer{p}-0.json").read_text())
        assert "sampler1-0-0 (partition 1)" in err["error"], err["error"]
        assert err["t"] - killed_at <= RPC_TIMEOUT_S + 3, (
            f"error came {err['t'] - killed_at:.1f} s after the kill"
        )
    assert codes["sampler0-0-0"] is not None
    pids = {str(p.pid) for p in job.procs.values()}
    left = [f.name for f in SHM_DIR.glob(f"{PREFIX}*") if f.name.split("-")[1] in pids]
    assert not left, f"shared-memory slot files left behind: {left}"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_sigint_to_a_sampler_process_stops_it_as_sigterm_does(tmp_path, homo_graph, sig):
    """Issue 28 #7: SIGINT made a sampler log its interrupt and then serve on through a
    graceful RPC shutdown that waits for every peer (here: the trainers' 60 s of sampling,
    bounded by init_timeout_s); like SIGTERM it now leaves RPC at once."""
    spec = _fault_spec(tmp_path, homo_graph)
    with Job(spec, 2, 1) as job:
        _wait_for([tmp_path / f"ready_trainer{p}-0" for p in range(2)], 90, job)
        sampler = job.procs["sampler1-0-0"]
        sent = datetime.now()
        sampler.send_signal(sig)
        code = sampler.wait(timeout=90)
        codes = job.wait(3 * RPC_TIMEOUT_S + 20)
    log = job.logs["sampler1-0-0"].read_text()
    left = re.search(
        r"^(\S+ \S+) sampler1-0-0: served partition 1, exiting \(after a failure\)", log, re.M
    )
    assert code == 1 and left, log[-2000:]
    # until it left RPC (its own log line), not until the interpreter's teardown ended
    took = (datetime.strptime(left[1], "%Y-%m-%d %H:%M:%S,%f") - sent).total_seconds()
    assert took < scaled(15), f"the sampler took {took:.0f} s to leave RPC after {sig.name}"
    for p in range(2):  # its peers see it gone, as after SIGTERM or SIGKILL
        assert codes[f"trainer{p}-0"] == 3, job.report()


def _ctx(rank: int) -> DistContext:
    return DistContext(
        rank=0, global_rank=rank, world_size=1, global_world_size=2, group_name="t", name=f"w{rank}"
    )


def test_port_in_use_is_a_clear_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(RpcInitError, match=f"RPC port {port} on 127.0.0.1 is already in use"):
            init_rpc(_ctx(0), "127.0.0.1", port, timeout_s=5, init_timeout_s=5)


def test_unreachable_master_is_a_clear_error():
    port = free_port()
    start = time.monotonic()
    with pytest.raises(
        RpcInitError, match=f"RPC master 127.0.0.1:{port} did not accept connections"
    ):
        init_rpc(_ctx(1), "127.0.0.1", port, timeout_s=5, init_timeout_s=1)
    assert time.monotonic() - start < scaled(10)
