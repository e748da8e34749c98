"""Checks a job passes in the launcher before any child starts, each failure one line.

A partition made for another job, a corrupt partition file, a busy fixed port or a full disk
would otherwise surface after every child started (tens of seconds later, as a traceback from
deep inside a child, or not at all: corrupt features train to `loss=nan` and "succeed").
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.config import ClusterConfig, ConfigError
from app.fsutil import DiskFullError, free_mib, is_write_failure
from app.launch.plan import EnvPlan, LocalPlan, Ports, ProcessPlan
from app.partition.reader import META_FILE, PartitionError, read_meta, verify_partition
from app.partition.spec import PartitionSpec


def expected_partition(spec: PartitionSpec) -> tuple[Path, str]:
    """Folder and fingerprint of the partition this job uses (link training has its own)."""
    if spec.link:
        from app.partition.link import link_partition_root

        root, fp, _ = link_partition_root(spec)
        return Path(root), fp
    from app.partition.task import config_fingerprint, partition_root

    fp = config_fingerprint(spec)
    return partition_root(spec, fp), fp


def check_partition_root(spec: PartitionSpec) -> None:
    """The job's partition folder must hold its partition (or nothing yet).

    Never suggests `partition.overwrite` first: the partition there may be someone's work.
    """
    root, wanted = expected_partition(spec)
    if spec.partition.overwrite or not (root / META_FILE).is_file():
        return  # asked to replace it, or nothing there yet: the job writes it
    meta = read_meta(root)  # a damaged META.json is one PartitionError naming it
    parts, nodes = int(meta["num_parts"]), spec.partition.num_parts
    if parts != nodes:
        raise PartitionError(
            f"partition at {root} has {parts} parts, this job has {nodes} nodes: set "
            f"cluster.num_nodes={parts} or partition.root=<another folder>"
        )
    found = meta.get("fingerprint")
    if found != wanted:
        raise PartitionError(
            f"partition at {root} was made for another dataset or partition settings "
            f"(fingerprint {found}, this job needs {wanted}): set partition.root=<another "
            "folder>, or leave it unset to use the default folder"
        )


def verify_for_job(c: ClusterConfig, root: Path) -> None:
    """Every file's checksum and the features' finiteness, once per partition (marker)."""
    verify_partition(root, c.num_nodes)


@contextmanager
def disk_full_as_one_line(where: Path) -> Iterator[None]:
    """Turn "no space left" while writing under `where` into one line naming the path.

    torch reports a failed write without an errno; by the time it arrives here the partition
    writer has removed its half-written folder, so the free space shown is after that cleanup.
    """
    try:
        yield
    except (OSError, RuntimeError) as err:
        if isinstance(err, DiskFullError) or not is_write_failure(err):
            raise  # already one line naming the file
        raise OSError(
            errno.ENOSPC,
            f"no space left on device writing under {where} ({free_mib(where):.0f} MiB free "
            "after cleanup): free some space, or set output_dir / partition.root on a larger disk",
        ) from None


def _bindable(addr: str, port: int) -> bool:
    """Whether a listener could bind `addr:port` now, as the job's listeners bind it.

    SO_REUSEADDR like `app.netutil.bind_listener`: connections of a previous job on the port
    left in TIME_WAIT (a job restarted by torchrun on the same ports) do not make it busy;
    a socket listening there does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, port))
            return True
        except OSError:
            return False


def check_ports_free(c: ClusterConfig, plan: ProcessPlan) -> None:
    """A fixed port already in use fails here, not after the children started.

    Checked where this machine is the one that listens: local mode, and node 0 in env mode.
    Free ports picked by the launcher (`cluster.master_port=0`) were free a moment ago.
    """
    if not c.master_port and isinstance(plan, LocalPlan):
        return
    if isinstance(plan, EnvPlan) and plan.node_rank != 0:
        return
    if not isinstance(plan, LocalPlan | EnvPlan):
        return
    addr = plan.procs[0].runtime.master_addr if plan.procs else "127.0.0.1"
    _check_ports(c, addr, plan.ports)


def check_ports_before_work(c: ClusterConfig, task: str) -> None:
    """A local training job's fixed `cluster.master_port` (and the next) busy: one line before
    the dataset is generated or partitioned (the caller leaves no run dir behind)."""
    if task == "train" and c.mode == "local" and c.master_port:
        if c.num_nodes > 1 or c.procs_per_node > 1:  # a single process opens no port
            _check_ports(c, "127.0.0.1", Ports(ddp=c.master_port, rpc=c.master_port + 1))


def _check_ports(c: ClusterConfig, addr: str, ports: Ports) -> None:
    bind_addr = addr if _is_local_addr(addr) else ""
    for what, port in (("ddp", ports.ddp), ("rpc", ports.rpc)):
        if not _bindable(bind_addr, port):
            raise ConfigError(
                f"port {port} ({what}) on {addr} is busy: choose another cluster.master_port "
                f"(now {c.master_port}; the job uses it and the next one), or 0 "
                "for free ports (local mode)"
            )


def _is_local_addr(addr: str) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((addr, 0))
        return True
    except OSError:
        return False
