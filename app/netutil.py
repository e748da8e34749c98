"""Listeners bound to the configured address only (loopback by default).

torch's `TCPStore` server binds every interface (`*:port`, `::` dual-stack) whatever host name
it is given, and so do the stores behind `init_process_group(init_method="tcp://...")` and
`rpc.init_rpc(init_method="tcp://...")`. Neither the store nor TensorPipe authenticates its
peers, so on a shared machine or network anyone who reaches the port can join the job.

`TCPStore(master_listen_fd=...)` serves on a socket we bound ourselves; this module binds it
to the configured address:

- `bound_store(addr, port, world_size, is_master, timeout_s)`: the one store helper. DDP:
  `dist.init_process_group("gloo", store=bound_store(...), rank=r, world_size=n)`.
- `BOUND_SCHEME` (`distgnn-tcp://addr:port`): the same store for `rpc.init_rpc` through a
  registered rendezvous handler: `init_method=f"{BOUND_SCHEME}://{addr}:{port}"`.
- `loopback_ifname_env(addr)`: gloo's and TensorPipe's own data sockets listen on the interface
  named by GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME; set to the loopback interface when the
  master address is a loopback one (the launcher passes them to every local child).
- `route_ifname_env(addr)`: the same variables for a remote master, set by each child on its
  own machine: the interface holding this machine's address on the route to the master, so
  data sockets listen on that address only (not on one guessed from the host name).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

BOUND_SCHEME = "distgnn-tcp"
LISTEN_BACKLOG = 1024


def _family(addr: str) -> socket.AddressFamily:
    return socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)[0][0]


def bind_listener(addr: str, port: int) -> socket.socket:
    """A listening TCP socket on `addr:port` only; a busy port is one clear OSError."""
    sock = socket.socket(_family(addr), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr, port))
        sock.listen(LISTEN_BACKLOG)
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise OSError(
                err.errno, f"port {port} on {addr} is already in use: free it or choose another"
            ) from None
        raise
    return sock


def bound_store(
    addr: str,
    port: int,
    world_size: int,
    is_master: bool,
    timeout_s: float,
    *,
    wait_for_workers: bool = True,
) -> Any:
    """A c10d `TCPStore`: the master's server listens on `addr:port` only; others connect."""
    from torch.distributed import TCPStore

    timeout = timedelta(seconds=timeout_s)
    if not is_master:
        return TCPStore(addr, port, world_size, False, timeout)
    # The store owns a duplicate of the listener: whether its constructor fails before or
    # after taking it, closing our own copy here is never a second close of its number.
    with bind_listener(addr, port) as sock:
        return TCPStore(
            addr,
            port,
            world_size,
            True,
            timeout,
            wait_for_workers=wait_for_workers,
            master_listen_fd=os.dup(sock.fileno()),
        )


def _bound_rendezvous(url: str, timeout: timedelta = timedelta(minutes=30), **kwargs: Any):
    """`distgnn-tcp://addr:port?rank=r&world_size=n[&timeout_s=t]`: like torch's `tcp://`,
    bound to addr. `timeout_s` bounds the wait for every member (torch's RPC passes no timeout,
    so its default, 30 minutes, would otherwise hold a job whose peer never comes)."""
    parsed = urlparse(url)
    query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
    if parsed.hostname is None or parsed.port is None:
        raise ValueError(f"{url}: expected {BOUND_SCHEME}://addr:port")
    rank, world_size = int(query["rank"]), int(query["world_size"])
    timeout_s = float(query.get("timeout_s", timeout.total_seconds()))
    store = bound_store(parsed.hostname, parsed.port, world_size, rank == 0, timeout_s)
    yield (store, rank, world_size)
    raise RuntimeError(f"{BOUND_SCHEME}:// cannot re-rendezvous")


def register_bound_rendezvous() -> None:
    """Make `init_method="distgnn-tcp://addr:port"` available (idempotent)."""
    from torch.distributed import register_rendezvous_handler

    try:
        register_rendezvous_handler(BOUND_SCHEME, _bound_rendezvous)
    except RuntimeError:  # already registered in this process
        pass


def is_loopback_ip(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def loopback_ifname() -> str | None:
    """Name of the interface holding 127.0.0.1 (`lo` on Linux), None if there is none."""
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and is_loopback_ip(a.address) for a in addrs):
            return name
    return None


def loopback_ifname_env(master_addr: str) -> dict[str, str]:
    """GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME = the loopback interface for a loopback master."""
    name = loopback_ifname() if is_loopback_ip(master_addr) else None
    return {"GLOO_SOCKET_IFNAME": name, "TP_SOCKET_IFNAME": name} if name else {}


def route_source(addr: str) -> str | None:
    """This machine's source address toward `addr` (a UDP connect: no packet is sent)."""
    with socket.socket(_family(addr), socket.SOCK_DGRAM) as s:
        try:
            s.connect((addr, 9))
        except OSError:
            return None
        return s.getsockname()[0]


def route_ifname(addr: str) -> str | None:
    """The interface holding this machine's source address toward `addr`."""
    import psutil

    local = route_source(addr)
    for name, addrs in psutil.net_if_addrs().items():
        if local and any(a.address == local for a in addrs):
            return name
    return None


def route_ifname_env(master_addr: str) -> dict[str, str]:
    """GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME = the interface this machine reaches the master by."""
    name = route_ifname(master_addr)
    return {"GLOO_SOCKET_IFNAME": name, "TP_SOCKET_IFNAME": name} if name else {}


def listening_addresses(pid: int | None = None) -> Iterator[tuple[str, int]]:
    """(ip, port) of every listening TCP socket of process `pid` (default: this one)."""
    import psutil

    for conn in psutil.Process(pid).net_connections("inet"):
        if conn.status == psutil.CONN_LISTEN:
            yield conn.laddr.ip, conn.laddr.port
