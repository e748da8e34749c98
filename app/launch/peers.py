"""Launchers of a job across machines watch each other: a machine cut off ends the job everywhere.

Each launcher watches its own children by their heartbeat files (`app.launch.heartbeat`), which
cannot see a whole machine cut off from the others: its processes keep beating while their
collectives and RPCs wait on a link that is gone. In env mode (torchrun / SLURM: one launcher
per machine) the launchers also beat to each other through a small c10d store that node 0's
launcher serves on `master_addr`, port `rpc + 1` (bound to that address only):

- every launcher adds 1 to `beat/<node>` every `beat_s`;
- node 0 names a node whose count stopped moving for `timeout_s` (by node 0's own clock);
- every other node names node 0 when the store has not answered, or node 0's count has not
  moved, for `timeout_s`.

A node is watched once it has beaten (a node that never starts is the children's
`init_timeout_s` case). A launcher whose children all finished marks `done/<node>` and stops
being watched; node 0 keeps the store up (at most `timeout_s`) until every node is done, so a
slower node is never mistaken for a lost one at the end of a job.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from app.netutil import bound_store, route_source

STORE_OP_TIMEOUT_S = 2.0  # one store call; a launcher's exit waits for at most one
# torch's client connect retries once after a delay: about 2 x (timeout + delay) in all
CONNECT_BOUND_S = 5 * STORE_OP_TIMEOUT_S


@dataclass
class PeerWatch:
    """This launcher's beat to, and watch over, the other launchers (see the module doc)."""

    node_rank: int
    num_nodes: int
    addrs: dict[int, str]  # what each node is called in messages (node 0: the master address)
    port: int
    timeout_s: float
    beat_s: float = 1.0
    _store: Any = None
    _seen: dict[int, tuple[int, float]] = field(default_factory=dict)  # node -> (count, when)
    _answered: float | None = None  # last round the store answered (None: not yet)
    _done: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def master_addr(self) -> str:
        return self.addrs[0]

    def start(self) -> PeerWatch:
        if self.node_rank == 0:  # serve before anyone connects; the others connect lazily
            self._store = bound_store(
                self.master_addr,
                self.port,
                self.num_nodes,
                True,
                STORE_OP_TIMEOUT_S,
                wait_for_workers=False,
            )
        self._thread = threading.Thread(target=self._loop, name="peer-watch", daemon=True)
        self._thread.start()
        return self

    def _connect(self) -> Any:
        """A client of node 0's store. A port that does not accept fails first, here, in
        Python: torch's connect retries for seconds and prints a C++ backtrace per try. The
        port is tried before torch is imported, so a close() never waits on that import."""
        socket.create_connection((self.master_addr, self.port), STORE_OP_TIMEOUT_S).close()
        from torch.distributed import TCPStore

        return TCPStore(
            self.master_addr,
            self.port,
            self.num_nodes,
            False,
            timeout=_seconds(STORE_OP_TIMEOUT_S),
        )

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self._store is None:
                    self._store = self._connect()
                self._round(self._store)
                self._answered = time.monotonic()
            except Exception:  # noqa: BLE001 (unreachable, reset, timed out: silence counts)
                if self.node_rank != 0:
                    self._store = None
            self._stop.wait(self.beat_s)

    def _round(self, store: Any) -> None:
        if self.node_rank != 0 and self._answered is None:
            store.set(f"addr/{self.node_rank}", route_source(self.master_addr) or "")
        store.add(f"beat/{self.node_rank}", 1)
        now = time.monotonic()
        for j in self._watched():
            count = int(store.add(f"beat/{j}", 0))
            if count and j not in self._seen and j not in self.addrs:
                self.addrs[j] = store.get(f"addr/{j}").decode()
            if count and (j not in self._seen or self._seen[j][0] != count):
                self._seen[j] = (count, now)
            if int(store.add(f"done/{j}", 0)):
                self._done.add(j)

    def _watched(self) -> list[int]:
        others = range(1, self.num_nodes) if self.node_rank == 0 else [0]
        return [j for j in others if j not in self._done]

    def lost(self) -> str | None:
        """The line naming a node silent for `timeout_s`, or None (called by the launcher)."""
        now = time.monotonic()
        if self.node_rank != 0 and self._answered and now - self._answered > self.timeout_s:
            return self._line(0, now - self._answered, "its launcher's store does not answer")
        for j in self._watched():
            if j in self._seen and now - self._seen[j][1] > self.timeout_s:
                return self._line(j, now - self._seen[j][1], "its launcher stopped beating")
        return None

    def _line(self, node: int, silent_s: float, why: str) -> str:
        host = self.addrs.get(node)
        where = f"node {node}" + (f" ({host})" if host else "")
        return (
            f"{where} unreachable from node {self.node_rank}: {why} for {silent_s:.1f} s "
            "(machine down or link cut)"
        )

    def finish(self) -> None:
        """Mark this node done; node 0 waits (at most `timeout_s`) for the others to be done."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=STORE_OP_TIMEOUT_S)
        try:
            store = self._store or self._connect()
            store.set(f"done/{self.node_rank}", "1")
            deadline = time.monotonic() + self.timeout_s
            while self.node_rank == 0 and time.monotonic() < deadline:
                if all(int(store.add(f"done/{j}", 0)) for j in range(1, self.num_nodes)):
                    break
                time.sleep(0.1)
        except Exception:  # noqa: BLE001 (the job is over; a peer gone now changes nothing)
            pass
        self.close()

    def close(self) -> None:
        """Stop beating; wait for the beat thread to leave any store call (a thread still in
        C++ when the interpreter exits aborts the process), then drop the store."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=CONNECT_BOUND_S)
        self._store = None


def _seconds(s: float):
    from datetime import timedelta

    return timedelta(seconds=s)
