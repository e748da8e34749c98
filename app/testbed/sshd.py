"""An sshd per testbed host, bound to that host's address, accepting one throwaway key.

The keys (a host key and a client key made for this testbed), `authorized_keys`, each host's
sshd config and an `ip_config.txt` of the hosts' addresses live in a private folder,
`state_dir(prefix)` (mode 0700, removed by `stop_sshd`), with the client's `ssh_config`
(that key, as root, no known_hosts); `ssh_cmd(prefix)` is the client command for
`cluster.ssh_cmd`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from app.testbed.net import Testbed, TestbedError

SSHD = "/usr/sbin/sshd"


def state_dir(prefix: str) -> Path:
    return Path(tempfile.gettempdir()) / f"distgnn-testbed-{prefix}"


def ssh_cmd(prefix: str) -> str:
    """The client command for `cluster.ssh_cmd`: `ssh -F <state>/ssh_config`."""
    return f"ssh -F {state_dir(prefix) / 'ssh_config'}"


def _client_config(state: Path) -> None:
    (state / "ssh_config").write_text(
        "Host *\n"
        f"  IdentityFile {state / 'id_ed25519'}\n"
        "  IdentitiesOnly yes\n"
        "  User root\n"
        "  StrictHostKeyChecking no\n"
        "  UserKnownHostsFile /dev/null\n"
        "  LogLevel ERROR\n"
        "  ConnectTimeout 5\n"
    )


def _keygen(path: Path) -> None:
    if not path.exists():
        subprocess.run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "distgnn-testbed",
                "-f",
                str(path),
            ],
            check=True,
            capture_output=True,
        )


def _config(tb: Testbed, i: int, state: Path) -> Path:
    cfg = state / f"sshd_h{i}.conf"
    cfg.write_text(
        f"ListenAddress {tb.addr(i)}\n"
        "Port 22\n"
        f"HostKey {state / 'host_key'}\n"
        f"AuthorizedKeysFile {state / 'authorized_keys'}\n"
        f"PidFile {state / f'sshd_h{i}.pid'}\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "UsePAM no\n"
        "StrictModes no\n"
        "X11Forwarding no\n"
        "PrintMotd no\n"
        "AcceptEnv none\n"
        "ClientAliveInterval 1\n"  # a client cut off: its session, and the job's
        "ClientAliveCountMax 5\n"  # processes under it, end within 5 s
    )
    return cfg


def start_sshd(tb: Testbed) -> Path:
    """Start (or keep) an sshd on port 22 of every host; return the state folder."""
    if not Path(SSHD).exists() or shutil.which("ssh") is None:
        raise TestbedError(
            f"{SSHD} or ssh not found: apt-get install openssh-server openssh-client"
        )
    state = state_dir(tb.prefix)
    state.mkdir(mode=0o700, exist_ok=True)
    _keygen(state / "host_key")
    _keygen(state / "id_ed25519")
    shutil.copy(state / "id_ed25519.pub", state / "authorized_keys")
    _client_config(state)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    (state / "ip_config.txt").write_text("".join(f"{tb.addr(i)}\n" for i in range(tb.hosts)))
    for i in range(tb.hosts):
        if _listening(tb, i):
            continue
        cfg = _config(tb, i, state)
        with open(state / f"sshd_h{i}.log", "ab") as log:
            subprocess.Popen(
                tb.host_cmd(i, [SSHD, "-D", "-e", "-f", str(cfg)]),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )  # PID 1 of the host's PID namespace; `down` kills it
    deadline = time.monotonic() + 10
    while not all(_listening(tb, i) for i in range(tb.hosts)):
        if time.monotonic() > deadline:
            raise TestbedError(f"sshd did not listen within 10 s: see {state}/sshd_h*.log")
        time.sleep(0.1)
    return state


def _listening(tb: Testbed, i: int) -> bool:
    out = subprocess.run(
        tb.netns_cmd(i, ["ss", "-Hltn", f"src {tb.addr(i)}:22"]), capture_output=True, text=True
    ).stdout
    return bool(out.strip())


def stop_sshd(prefix: str) -> None:
    """Remove the state folder (keys and configs); the sshds die with their namespaces."""
    shutil.rmtree(state_dir(prefix), ignore_errors=True)
