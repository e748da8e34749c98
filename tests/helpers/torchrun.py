"""torchrun command lines for the 2-node `cluster=env` jobs of tests/launcher and tests/hosts."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from tests.helpers.jobs import REPO

TORCHRUN = Path(sys.executable).with_name("torchrun")
# torchrun's workers run `python -m app`: the project and its Hydra launcher plugin on the path
PYTHONPATH = f"{REPO}:{REPO / 'launchers'}"


def torchrun_cmd(
    app_args: Sequence[str],
    endpoint: str,
    *,
    rdzv_id: str | None = None,
    node_rank: int | None = None,
    options: Sequence[str] = (),
) -> list[str]:
    """One agent of a 2-node torchrun job, one process per node, running `python -m app ARGS`.

    With `node_rank`, torchrun's static rendezvous (node 0 serves the store at `endpoint`,
    `host:port`); otherwise its c10d rendezvous `rdzv_id` at `endpoint`, the one that lets
    agents restart their nodes (`--max-restarts` in `options`).
    """
    cmd = [str(TORCHRUN), "--nnodes=2", "--nproc-per-node=1"]
    if node_rank is None:
        cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={rdzv_id}"]
    else:
        host, port = endpoint.rsplit(":", 1)
        cmd += [f"--node-rank={node_rank}", f"--master-addr={host}", f"--master-port={port}"]
    return [*cmd, *options, "-m", "app", *app_args]
