"""The hosts' testbed (tests/hosts): whether it can be made here, and the jobs run on it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from app.testbed.net import Testbed, TestbedError, check_support
from app.testbed.sshd import SSHD, ssh_cmd
from tests.helpers.jobs import REPO

JOB = ("+experiment=smoke", "cluster.num_nodes=2", "mlflow.enabled=false", "train.epochs=2")


def unavailable() -> str | None:
    """Why the testbed cannot run here, or None."""
    try:
        check_support()
    except TestbedError as err:
        return str(err)
    if shutil.which("unshare") is None:
        return "testbed needs `unshare` (util-linux)"
    if not Path(SSHD).exists():
        return f"{SSHD} not installed (apt-get install openssh-server)"
    return None


def ssh_args(bed: Testbed, ip_config: Path) -> list[str]:
    """The overrides of an ssh-mode job whose launcher runs on h0."""
    return [
        "cluster=ssh",
        f"cluster.ip_config={ip_config}",
        "cluster.allow_remote=true",
        f"cluster.workdir={REPO}",
        f"cluster.python={sys.executable}",
        f"cluster.ssh_cmd='{ssh_cmd(bed.prefix)}'",
    ]


def host_app(bed: Testbed, i: int, args: list[str], log: Path, env: dict | None = None):
    """`python -m app ARGS` started on host i (a process of the test; output to `log`)."""
    cmd = bed.host_cmd(i, [sys.executable, "-m", "app", *args])
    with open(log, "w") as fh:
        return subprocess.Popen(
            cmd,
            cwd=REPO,
            env={**os.environ, **(env or {})},
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
