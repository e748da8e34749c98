"""Trust (issue 12): every listener of a job binds to the configured (loopback) address.

torch's own stores listen on every interface (`::`); `app.netutil.bound_store` and the
`distgnn-tcp://` rendezvous serve on the configured address only. Checked on the real
listening sockets (psutil), in real DDP (gloo) + RPC (TensorPipe) processes.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from app.launch.plan import free_ports
from app.netutil import bound_store, listening_addresses, loopback_ifname_env
from tests.helpers.jobs import REPO

WORKER = """
import json, os, sys
import torch, torch.distributed as dist, torch.distributed.rpc as rpc
from app.netutil import (
    BOUND_SCHEME, bound_store, listening_addresses, loopback_ifname_env, register_bound_rendezvous,
)
rank, ddp_port, rpc_port = (int(a) for a in sys.argv[1:4])
os.environ.update(loopback_ifname_env("127.0.0.1"))
store = bound_store("127.0.0.1", ddp_port, 2, rank == 0, 60)
dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
register_bound_rendezvous()
opts = rpc.TensorPipeRpcBackendOptions(
    init_method=f"{BOUND_SCHEME}://127.0.0.1:{rpc_port}", rpc_timeout=60
)
rpc.init_rpc(f"w{rank}", rank=rank, world_size=2, rpc_backend_options=opts)
t = torch.ones(3)
dist.all_reduce(t)
assert rpc.rpc_sync(f"w{1 - rank}", torch.add, args=(t, 1)).tolist() == [3.0] * 3
print("LISTEN " + json.dumps(sorted(set(listening_addresses()))), flush=True)
rpc.shutdown()
dist.destroy_process_group()
"""


def test_bound_store_listens_on_the_given_address_only():
    (port,) = free_ports(1)
    store = bound_store("127.0.0.1", port, 1, True, 10)
    store.set("k", "v")
    assert store.get("k") == b"v"
    mine = [a for a in listening_addresses() if a[1] == port]
    assert mine == [("127.0.0.1", port)]
    with pytest.raises(OSError, match=f"port {port} on 127.0.0.1 is already in use"):
        bound_store("127.0.0.1", port, 1, True, 10)


def test_loopback_master_pins_gloo_and_tensorpipe_to_lo():
    env = loopback_ifname_env("127.0.0.1")
    assert env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"]
    assert socket.if_nametoindex(env["GLOO_SOCKET_IFNAME"]) > 0
    assert loopback_ifname_env("10.0.0.5") == {}


@pytest.mark.dist
def test_ddp_and_rpc_listen_on_loopback_only(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    ddp, rpc_port = free_ports(2)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), str(ddp), str(rpc_port)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (1, 0)
    ]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=120)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-2000:] for o in outs)
    (line,) = [ln for ln in outs[1].splitlines() if ln.startswith("LISTEN ")]
    listening = [tuple(a) for a in json.loads(line.removeprefix("LISTEN "))]
    assert ("127.0.0.1", ddp) in listening and ("127.0.0.1", rpc_port) in listening
    assert {ip for ip, _ in listening} == {"127.0.0.1"}, listening
