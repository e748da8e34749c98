"""The hosts' fixtures: a 2-host testbed (skipped, with the reason, where it cannot be made),
the smoke dataset partitioned in two, the local run the hosts' runs are compared with."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.testbed.net import Testbed, TestbedError, check_support, leftovers
from app.testbed.sshd import SSHD, ssh_cmd, start_sshd, stop_sshd
from tests.conftest import REPO, run_app

JOB = ("+experiment=smoke", "cluster.num_nodes=2", "mlflow.enabled=false", "train.epochs=2")
KEYS = ("loss", "train_acc", "val_acc", "test_acc")


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


@pytest.fixture(scope="session")
def bed() -> Iterator[Testbed]:
    """Two unshaped hosts with an sshd each, under a prefix of this test session's own."""
    reason = unavailable()
    if reason:
        pytest.skip(f"multi-host testbed unavailable: {reason}")
    tb = Testbed(hosts=2, prefix=f"dgt{os.getpid() % 100000}")
    try:
        tb.up()
        start_sshd(tb)
        yield tb
    finally:
        tb.down()
        stop_sshd(tb.prefix)
    assert leftovers(tb.prefix) == []


@pytest.fixture(scope="session")
def made(tmp_path_factory) -> Path:
    """An output dir with the smoke dataset and its 2-part partition at `<dir>/P`."""
    out = tmp_path_factory.mktemp("hosts")
    proc = run_app("task=partition", *JOB, *paths(out), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


class LocalRun:
    """The same job on one machine (`cluster=local`, loopback), started at once in the
    background so it overlaps the first job across hosts; `result()` waits for it."""

    def __init__(self, made: Path) -> None:
        self.job = made / "local"
        cmd = [sys.executable, "-m", "app", *JOB, *paths(made), f"hydra.run.dir={self.job}"]
        self.log = made / "local.log"
        with open(self.log, "w") as fh:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)

    def result(self) -> dict:
        assert self.proc.wait(timeout=240) == 0, self.log.read_text()[-2000:]
        return json.loads((self.job / "result.json").read_text())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def local_run(made: Path) -> Iterator[LocalRun]:
    run = LocalRun(made)
    yield run
    run.stop()


def paths(out: Path) -> list[str]:
    return [f"output_dir={out}", f"dataset.root={out / 'data'}", f"partition.root={out / 'P'}"]


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
