"""Hosts of the testbed: network namespaces on a bridge, each host's egress shaped with `tbf`.

Host i is the namespace `<prefix>-h<i>` holding `lo` and `eth0` (one end of a veth pair whose
other end, `<prefix>-v<i>`, is a port of the bridge `<prefix>-br`), with address
`<subnet>.(i + 1)`. The root namespace gets no address on the bridge, so nothing on the bridge
can reach anything else, and nothing else can reach it: traffic stays between the hosts.
IPv6 is off inside the hosts (no router solicitations in the byte counters).

Every step is idempotent: `up` creates what is missing and replaces each host's shaping;
`down` finds the testbed's pieces by name (whatever `up` built), kills the processes left in
its namespaces and removes namespaces, veths and the bridge (a host's qdisc goes with its
veth).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PREFIX = "distgnn"
DEFAULT_SUBNET = "10.213.0.0/24"
HOST_IF = "eth0"
MAX_IFNAME = 15  # IFNAMSIZ - 1
RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}


class TestbedError(RuntimeError):
    """A refusal or failure of the testbed, one line naming what and how to fix it."""

    __test__ = False  # not a pytest class


def parse_rate(rate: str | None) -> int | None:
    """Bits per second of `rate` ("10gbit", "500mbit"); None for unshaped ("", "none")."""
    if rate is None or rate.strip().lower() in ("", "none", "0", "unshaped"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?bit)", rate.strip().lower())
    if not m:
        raise TestbedError(f"rate {rate!r}: expected e.g. 1gbit, 10gbit, 500mbit, or none")
    bits = int(float(m.group(1)) * RATE_UNITS[m.group(2)])
    if bits <= 0:
        raise TestbedError(f"rate {rate!r} must be positive (or none for unshaped)")
    return bits


def tbf_args(bits_per_s: int) -> list[str]:
    """`tbf` parameters for a rate: a 10 ms bucket (at least 256 KiB, so 64 KiB GSO
    segments pass) and a 50 ms queue behind it."""
    rate_bytes = bits_per_s // 8
    burst = max(rate_bytes // 100, 256 * 1024)
    limit = burst + rate_bytes // 20
    return ["tbf", "rate", f"{bits_per_s}bit", "burst", str(burst), "limit", str(limit)]


def check_support() -> None:
    """Refuse, in one line, where namespaces cannot be made: not root, no `ip`/`tc`, no netns."""
    if os.geteuid() != 0:
        raise TestbedError(f"testbed needs root (euid {os.geteuid()}): run it with sudo")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise TestbedError(f"testbed needs `{tool}` (iproute2): apt-get install iproute2")
    if not Path("/proc/self/ns/net").exists():
        raise TestbedError("testbed needs network namespaces: this kernel has none")
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise TestbedError(f"`ip netns` fails here: {probe.stderr.strip()}")


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise TestbedError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()}")
    return proc


@dataclass(frozen=True)
class Testbed:
    """N hosts named by `prefix` on the private `subnet` (see the module docstring)."""

    __test__ = False  # not a pytest class

    hosts: int = 2
    prefix: str = DEFAULT_PREFIX
    subnet: str = DEFAULT_SUBNET

    def __post_init__(self) -> None:
        net = ipaddress.ip_network(self.subnet)
        if not net.is_private or net.version != 4:
            raise TestbedError(f"subnet {self.subnet}: use a private IPv4 network")
        if not 1 <= self.hosts <= min(net.num_addresses - 2, 99):
            raise TestbedError(f"--hosts {self.hosts}: between 1 and 99")
        if len(self.veth(99)) > MAX_IFNAME or not re.fullmatch(r"[a-z0-9]+", self.prefix):
            raise TestbedError(f"prefix {self.prefix!r}: lower-case letters/digits, at most 11")

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    def netns(self, i: int) -> str:
        return f"{self.prefix}-h{i}"

    def veth(self, i: int) -> str:
        return f"{self.prefix}-v{i}"

    def addr(self, i: int) -> str:
        return str(ipaddress.ip_network(self.subnet).network_address + i + 1)

    @property
    def prefixlen(self) -> int:
        return ipaddress.ip_network(self.subnet).prefixlen

    def netns_cmd(self, i: int, cmd: list[str]) -> list[str]:
        """`cmd` run in host i's network namespace (tools: `ss`, `tc`, `ip`)."""
        return ["ip", "netns", "exec", self.netns(i), *cmd]

    def host_cmd(self, i: int, cmd: list[str]) -> list[str]:
        """`cmd` run as a process of host i: its network namespace, and PID and mount
        namespaces of its own (its own /proc and /dev/shm), as on a machine of its own.

        Without the PID namespace, TensorPipe would move tensors between hosts by cross-memory
        attach (its `cma` channel checks only the boot id, PID and user namespaces), never
        touching the link; without its own /dev/shm, PID-named shared-memory files of two
        hosts would collide. The command is PID 1 there: when it ends, every process it left
        on the host ends; a SIGTERM to the returned command reaches it.
        """
        own_shm = 'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$0" "$@"'
        unshare = ["unshare", "--pid", "--fork", "--kill-child=SIGTERM", "--mount-proc"]
        unshare += ["sh", "-c", own_shm]
        return self.netns_cmd(i, [*unshare, *cmd])

    def up(self, rate: str | None = None) -> None:
        """Create what is missing of hosts 0..N-1 (and remove higher ones); shape every host."""
        check_support()
        bits = parse_rate(rate)
        if not Path(f"/sys/class/net/{self.bridge}").exists():
            _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "link", "set", self.bridge, "up")
        for i in existing_hosts(self.prefix):
            if i >= self.hosts:
                _remove_host(self, i)
        present = set(existing_hosts(self.prefix))
        for i in range(self.hosts):
            if i not in present:
                self._add_host(i)
            self.shape(i, bits)

    def _add_host(self, i: int) -> None:
        ns, veth = self.netns(i), self.veth(i)
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "del", veth, check=False)  # a stale half from an interrupted `up`
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", HOST_IF, "netns", ns)
        _run("ip", "link", "set", veth, "master", self.bridge, "up")
        inside = ["ip", "netns", "exec", ns]
        for knob in ("all", "default"):
            _run(*inside, "sysctl", "-q", "-w", f"net.ipv6.conf.{knob}.disable_ipv6=1")
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "ip", "addr", "add", f"{self.addr(i)}/{self.prefixlen}", "dev", HOST_IF)
        _run(*inside, "ip", "link", "set", HOST_IF, "up")

    def shape(self, i: int, bits_per_s: int | None) -> None:
        """Host i's egress at `bits_per_s` (tbf), or unshaped (the default qdisc) for None."""
        dev = ["ip", "netns", "exec", self.netns(i), "tc", "qdisc"]
        if bits_per_s is None:
            _run(*dev, "del", "dev", HOST_IF, "root", check=False)
        else:
            _run(*dev, "replace", "dev", HOST_IF, "root", *tbf_args(bits_per_s))

    def link(self, i: int, up: bool) -> None:
        """Cut (or restore) host i's link: its bridge port down, as a pulled cable."""
        _run("ip", "link", "set", self.veth(i), "up" if up else "down")

    def down(self) -> None:
        """Remove every piece of this prefix's testbed (see `teardown`)."""
        teardown(self.prefix)


def existing_hosts(prefix: str) -> list[int]:
    """Indices of the namespaces `<prefix>-h<i>` that exist now."""
    out = _run("ip", "netns", "list").stdout
    found = (
        re.fullmatch(rf"{re.escape(prefix)}-h(\d+)", line.split()[0])
        for line in out.split("\n")
        if line.strip()
    )
    return sorted(int(m.group(1)) for m in found if m)


def netns_pids(ns: str) -> list[int]:
    """Processes whose network namespace is `ns`."""
    out = _run("ip", "netns", "pids", ns, check=False).stdout
    return [int(p) for p in out.split()]


def kill_netns(ns: str, grace_s: float = 3.0) -> None:
    """SIGTERM every process in `ns`, SIGKILL what is left after `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in netns_pids(ns):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while netns_pids(ns) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not netns_pids(ns):
            return


def _remove_host(tb: Testbed, i: int) -> None:
    kill_netns(tb.netns(i))
    _run("ip", "netns", "del", tb.netns(i), check=False)
    _run("ip", "link", "del", tb.veth(i), check=False)


def teardown(prefix: str) -> None:
    """Kill the processes in `<prefix>-h*`, delete those namespaces, their veths, the bridge."""
    check_support()
    tb = Testbed(hosts=1, prefix=prefix)
    for i in existing_hosts(prefix):
        _remove_host(tb, i)
    links = _run("ip", "-o", "link", "show").stdout
    for name in re.findall(rf"^\d+: ({re.escape(prefix)}-v\d+)[@:]", links, re.M):
        _run("ip", "link", "del", name, check=False)
    if Path(f"/sys/class/net/{tb.bridge}").exists():
        _run("ip", "link", "del", tb.bridge)


def leftovers(prefix: str) -> list[str]:
    """What of the testbed `prefix` exists now: namespaces, links (empty after `down`)."""
    links = _run("ip", "-o", "link", "show").stdout
    names = re.findall(rf"^\d+: ({re.escape(prefix)}-[a-z0-9]+)[@:]", links, re.M)
    return [f"netns {prefix}-h{i}" for i in existing_hosts(prefix)] + [f"link {n}" for n in names]
