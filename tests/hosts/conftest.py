"""The hosts' fixtures: a 2-host testbed (skipped, with the reason, where it cannot be made),
the smoke dataset partitioned in two, the local run the hosts' runs are compared with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.testbed.net import Testbed, leftovers
from app.testbed.sshd import start_sshd, stop_sshd
from tests.helpers.hosts import JOB, unavailable
from tests.helpers.jobs import REPO, out_paths, partitioned


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
    return partitioned(tmp_path_factory.mktemp("hosts"), *JOB)


class LocalRun:
    """The same job on one machine (`cluster=local`, loopback), started at once in the
    background so it overlaps the first job across hosts; `result()` waits for it."""

    def __init__(self, made: Path) -> None:
        self.job = made / "local"
        cmd = [sys.executable, "-m", "app", *JOB, *out_paths(made), f"hydra.run.dir={self.job}"]
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
