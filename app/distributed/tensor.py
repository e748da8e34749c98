"""`DistTensor`: a named, row-sharded tensor (DGL's `dgl.distributed.DistTensor`).

Row `i` lives on the partition that owns node `i` (the partition book decides), in the
process `trainer<p>.0` of that node; every other process reads and writes it by RPC. Reads and
writes are batched: one call per owning partition, all issued before any is awaited.

Owners answer through module-level functions (`_pull`, `_push`, `_apply`) that find the shard by
name in this process's registry, so any RPC worker can serve them without extra plumbing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

import torch

from app.distributed import rpc
from app.distributed.rpc import PeerError
from app.runtime import worker_name

_REGISTRY: dict[str, DistTensor] = {}
_REGISTERED = threading.Condition()
REGISTRATION_WAIT_S = 60.0


class PartitionBook(Protocol):
    num_parts: int

    def partition_of(self, ids: torch.Tensor) -> torch.Tensor: ...


class DistTensorError(PeerError):
    """A read or write of a DistTensor failed on a peer; names the tensor and the peer."""


def owner_name(part: int) -> str:
    """The process holding partition `part`'s rows: the node's first trainer."""
    return worker_name("trainer", part, 0)


def zeros_init(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype)


class DistTensor:
    """A `[num_rows, *row_shape]` tensor sharded by a partition book.

    Args:
        shape: global shape; rows are indexed by global node id.
        dtype: element type.
        name: unique name; peers address the tensor by it.
        book: partition book (`partition_of(ids) -> part ids`, `num_parts`).
        part_id: the partition this process belongs to.
        is_owner: whether this process holds the partition's shard (the node's first trainer).
        init_func: `init_func(shape, dtype)` for the local shard (DGL's signature).
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        name: str,
        *,
        book: PartitionBook,
        part_id: int,
        is_owner: bool = True,
        init_func: Callable[[tuple[int, ...], torch.dtype], torch.Tensor] = zeros_init,
    ) -> None:
        self.shape, self.dtype, self.name = tuple(shape), dtype, name
        self.book, self.part_id, self.is_owner = book, part_id, is_owner
        parts = book.partition_of(torch.arange(self.shape[0]))
        self.owned = torch.nonzero(parts == part_id).flatten()  # sorted global ids
        # global id -> row of the local shard (-1: not owned); int32 keeps it at 4 bytes a row
        self.row_of = torch.full((self.shape[0],), -1, dtype=torch.int32)
        self.row_of[self.owned] = torch.arange(len(self.owned), dtype=torch.int32)
        self.local = init_func((len(self.owned), *self.shape[1:]), dtype) if is_owner else None
        self.lock = threading.Lock()
        if is_owner:
            with _REGISTERED:
                if name in _REGISTRY:
                    raise ValueError(f"DistTensor name {name!r} is already used in this process")
                _REGISTRY[name] = self
                _REGISTERED.notify_all()

    def __len__(self) -> int:
        return self.shape[0]

    def local_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows in the local shard of owned global ids (one vectorised map lookup)."""
        rows = self.row_of[ids].long()
        if len(rows) and int(rows.min()) < 0:
            raise IndexError(f"DistTensor {self.name!r}: ids not owned by partition {self.part_id}")
        return rows

    def _split(self, ids: torch.Tensor) -> dict[int, torch.Tensor]:
        """Positions into `ids` grouped by owning partition."""
        parts = self.book.partition_of(ids)
        return {int(p): torch.nonzero(parts == p).flatten() for p in torch.unique(parts)}

    def _call_all(self, fn, ids: torch.Tensor, *payload: torch.Tensor) -> dict[int, object]:
        """Run `fn(name, ids_p, payload_p...)` on every owner of `ids`; local ones in-process."""
        groups = self._split(ids)
        futures, results = {}, {}
        for part, where in groups.items():
            args = (self.name, ids[where], *(t[where] for t in payload))
            if part == self.part_id and self.is_owner:
                continue
            futures[part] = rpc.call_async(owner_name(part), fn, args, part)
        for part, where in groups.items():
            if part == self.part_id and self.is_owner:
                results[part] = fn(self.name, ids[where], *(t[where] for t in payload))
        for part, fut in futures.items():
            try:
                results[part] = fut.wait()  # bounded by the job's RPC timeout
            except PeerError as err:  # one line naming the peer (see `rpc.describe_failure`)
                raise DistTensorError(
                    f"DistTensor {self.name!r}: {fn.__name__[1:]} failed: {err}"
                ) from None
        return results

    def __getitem__(self, ids: torch.Tensor) -> torch.Tensor:
        ids = torch.as_tensor(ids, dtype=torch.long)
        out = torch.empty((len(ids), *self.shape[1:]), dtype=self.dtype)
        results = self._call_all(_pull, ids)
        for part, where in self._split(ids).items():
            out[where] = results[part]
        return out

    def __setitem__(self, ids: torch.Tensor, values: torch.Tensor) -> None:
        ids = torch.as_tensor(ids, dtype=torch.long)
        values = torch.as_tensor(values, dtype=self.dtype).expand(len(ids), *self.shape[1:])
        self._call_all(_push, ids, values.contiguous())

    def apply(self, update: str, ids: torch.Tensor, grads: torch.Tensor, hyper: dict) -> None:
        """Apply a sparse optimizer `update` to rows `ids` on their owners (see `app.distributed.optim`)."""
        self._call_all(_ApplyCall(update, hyper), ids, grads)


def lookup(name: str) -> DistTensor:
    """The shard registered under `name`, waiting briefly for a peer that is still creating it."""
    deadline = time.monotonic() + REGISTRATION_WAIT_S
    with _REGISTERED:
        while name not in _REGISTRY:
            left = deadline - time.monotonic()
            if left <= 0:
                raise KeyError(f"no DistTensor named {name!r} in this process")
            _REGISTERED.wait(left)
        return _REGISTRY[name]


def unregister(name: str) -> None:
    with _REGISTERED:
        _REGISTRY.pop(name, None)


def _pull(name: str, ids: torch.Tensor) -> torch.Tensor:
    t = lookup(name)
    with t.lock:
        return t.local.index_select(0, t.local_rows(ids))


def _push(name: str, ids: torch.Tensor, values: torch.Tensor) -> None:
    t = lookup(name)
    with t.lock:
        t.local.index_copy_(0, t.local_rows(ids), values)


class _ApplyCall:
    """A picklable callable: `(name, ids, grads) -> None` running one sparse update on the owner."""

    def __init__(self, update: str, hyper: dict) -> None:
        self.update, self.hyper = update, hyper
        self.__name__ = f"_{update}"

    def __call__(self, name: str, ids: torch.Tensor, grads: torch.Tensor) -> None:
        from app.distributed.optim import UPDATES

        t = lookup(name)
        with t.lock:
            UPDATES[self.update](t, t.local_rows(ids), grads, self.hyper)
