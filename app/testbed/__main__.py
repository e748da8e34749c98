"""`python -m app.testbed up|down|status|exec`: the testbed of `app.testbed.net` from a shell.

    python -m app.testbed up --hosts 3 --rate 10gbit --sshd   # 10.213.0.1-3, sshd on each
    python -m app.testbed exec h0 -- .venv/bin/distgnn ...     # run a command on host 0
    python -m app.testbed status                              # hosts, addresses, qdiscs
    python -m app.testbed down                                # nothing left

A refusal (not root, no namespaces, a bad rate) is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from app.testbed.net import DEFAULT_PREFIX, DEFAULT_SUBNET, Testbed, TestbedError, existing_hosts
from app.testbed.sshd import ssh_cmd, start_sshd, state_dir, stop_sshd

EXIT_REFUSED = 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m app.testbed", description=__doc__.splitlines()[0])
    p.add_argument("--prefix", default=DEFAULT_PREFIX, help="names: <prefix>-h<i>, <prefix>-br")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="create (or adjust) the hosts")
    up.add_argument("--hosts", type=int, default=2)
    up.add_argument("--rate", default="none", help="egress per host: 1gbit, 10gbit, ... or none")
    up.add_argument("--subnet", default=DEFAULT_SUBNET)
    up.add_argument("--sshd", action="store_true", help="an sshd on port 22 of every host")
    sub.add_parser("down", help="remove every namespace, veth, bridge, key of the testbed")
    sub.add_parser("status", help="hosts, addresses and qdiscs")
    ex = sub.add_parser("exec", help="run a command on a host: exec h1 -- CMD ...")
    ex.add_argument("host", help="h<i>")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    return p


def _host_index(name: str) -> int:
    if not (name.startswith("h") and name[1:].isdigit()):
        raise TestbedError(f"host {name!r}: expected h0, h1, ...")
    return int(name[1:])


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "up":
            tb = Testbed(hosts=args.hosts, prefix=args.prefix, subnet=args.subnet)
            tb.up(args.rate)
            print(f"testbed {args.prefix}: {tb.hosts} hosts, rate {args.rate}")
            for i in range(tb.hosts):
                print(f"  h{i}  netns {tb.netns(i)}  {tb.addr(i)}")
            if args.sshd:
                state = start_sshd(tb)
                print(f"  sshd on port 22 of each host; ip_config: {state / 'ip_config.txt'}")
                print(f"  cluster.ssh_cmd='{ssh_cmd(args.prefix)}'")
            return 0
        if args.cmd == "down":
            Testbed(prefix=args.prefix).down()
            stop_sshd(args.prefix)
            print(f"testbed {args.prefix}: down")
            return 0
        if args.cmd == "status":
            hosts = existing_hosts(args.prefix)
            print(f"testbed {args.prefix}: {len(hosts)} hosts; state {state_dir(args.prefix)}")
            tb = Testbed(prefix=args.prefix)
            for i in hosts:
                subprocess.run(tb.netns_cmd(i, ["ip", "-br", "addr", "show", "eth0"]))
                subprocess.run(tb.netns_cmd(i, ["tc", "qdisc", "show", "dev", "eth0"]))
            return 0
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            raise TestbedError("exec: give a command after the host: exec h0 -- CMD")
        tb = Testbed(prefix=args.prefix)
        os.execvp("ip", tb.host_cmd(_host_index(args.host), command))
    except TestbedError as err:
        print(f"testbed: {err}", file=sys.stderr)
        return EXIT_REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(main())
