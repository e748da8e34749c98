"""`DistTensor`: a named, row-sharded tensor (DGL's `dgl.distributed.DistTensor`).

Row `i` lives on the partition that owns node `i` (the partition book decides), in the
process `trainer<p>.0` of that node; every other process reads and writes it by RPC. Reads and
writes are batched: one call per owning partition, all issued before any is awaited.

Owners answer the endpoints "tensor_pull", "tensor_push" and "tensor_apply" (see `server`) with
the module-level `pull`, `push` and `apply_update`, which find the shard by name in this
process's registry; the routing (split by owner, remote calls, local part meanwhile, merge) is
`app.distributed.routing`'s, so failures are `PeerError`s bounded by the job's RPC timeout.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol

import torch

from app.distributed import rpc
from app.distributed.routing import Positions, merge_rows, route, split_by_owner, take
from app.distributed.rpc import PeerError
from app.runtime import worker_name

_REGISTRY: dict[str, DistTensor] = {}
_REGISTERED = threading.Condition()
REGISTRATION_WAIT_S = 60.0
READ_PIECE_BYTES = 8 << 20  # a large read goes in pieces of about this many bytes per call


class PartitionBook(Protocol):
    num_parts: int

    def partition_of(self, ids: torch.Tensor) -> torch.Tensor: ...


_SHARD_IDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # book -> {key: ids}
_SHARD_IDS_LOCK = threading.Lock()


def shard_ids(
    book: PartitionBook, part_id: int, num_rows: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(owned, row_of) of part `part_id` among `num_rows` ids: its sorted global ids, and each
    id's row in its shard (int32, -1: not owned). Computed once per book and part, and shared
    (read-only) by every DistTensor over them: a layer-wise evaluation makes one per layer."""
    with _SHARD_IDS_LOCK:
        known = _SHARD_IDS.setdefault(book, {})
        if (part_id, num_rows) not in known:
            parts = book.partition_of(torch.arange(num_rows))
            owned = torch.nonzero(parts == part_id).flatten()
            # int32 keeps the map at 4 bytes a row
            row_of = torch.full((num_rows,), -1, dtype=torch.int32)
            row_of[owned] = torch.arange(len(owned), dtype=torch.int32)
            known[part_id, num_rows] = owned, row_of
        return known[part_id, num_rows]


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
        # sorted owned global ids; global id -> row of the local shard (-1: not owned)
        self.owned, self.row_of = shard_ids(book, part_id, self.shape[0])
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

    def _route(
        self, op: str, ids: torch.Tensor, *payload: torch.Tensor, extra: tuple = ()
    ) -> tuple:
        """Run `op` ("pull", "push", "apply") on the owners of `ids`, each with its rows of
        `ids` and `payload` (the local shard in-process); (split, answers by partition)."""
        split = split_by_owner(self.book.partition_of(ids).numpy())

        def args(where: Positions) -> tuple:
            return (self.name, *extra, take(ids, where), *(take(t, where) for t in payload))

        def call(part: int, where: Positions) -> rpc.PendingCall:
            return rpc.call_async(owner_name(part), f"tensor_{op}", args(where), part)

        try:
            return split, route(
                split,
                {self.part_id} if self.is_owner else (),
                call,
                lambda _, where: OPS[op](*args(where)),
            )
        except PeerError as err:  # one line naming the peer (see `rpc.describe_failure`)
            raise DistTensorError(f"DistTensor {self.name!r}: {op} failed: {err}") from None

    def __getitem__(self, ids: torch.Tensor) -> torch.Tensor:
        return self.read(ids)

    def read(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `ids`, written into `out` when given (`[len(ids), *row_shape]`, e.g. the tail of
        a caller's buffer: each owner's answer is copied once, straight to its positions).

        A large read goes in pieces of ~`READ_PIECE_BYTES` (one batched call per owner and
        piece): messages stay bounded, and both ends reuse the same few MB of buffers instead
        of touching fresh pages for one answer the size of the whole read."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        if out is None:
            out = torch.empty((len(ids), *self.shape[1:]), dtype=self.dtype)
        row_bytes = max(1, math.prod(self.shape[1:]) * self.dtype.itemsize)
        step = max(1, READ_PIECE_BYTES // row_bytes)
        for lo in range(0, len(ids), step):
            merge_rows(*self._route("pull", ids[lo : lo + step]), out[lo : lo + step])
        return out

    def __setitem__(self, ids: torch.Tensor, values: torch.Tensor) -> None:
        ids = torch.as_tensor(ids, dtype=torch.long)
        values = torch.as_tensor(values, dtype=self.dtype).expand(len(ids), *self.shape[1:])
        self._route("push", ids, values.contiguous())

    def apply(self, update: str, ids: torch.Tensor, grads: torch.Tensor, hyper: dict) -> None:
        """Apply the sparse optimizer `update` (see `UPDATES`) to rows `ids` on their owners."""
        self._route("apply", ids, grads, extra=(update, hyper))


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


def pull(name: str, ids: torch.Tensor) -> torch.Tensor:
    """Owned rows `ids` of tensor `name` (the "tensor_pull" endpoint)."""
    t = lookup(name)
    with t.lock:
        return t.local.index_select(0, t.local_rows(ids))


def push(name: str, ids: torch.Tensor, values: torch.Tensor) -> None:
    """Overwrite owned rows `ids` of tensor `name` (the "tensor_push" endpoint)."""
    t = lookup(name)
    with t.lock:
        t.local.index_copy_(0, t.local_rows(ids), values)


def apply_update(
    name: str, update: str, hyper: dict, ids: torch.Tensor, grads: torch.Tensor
) -> None:
    """One sparse optimizer step on owned rows `ids` of `name` (the "tensor_apply" endpoint)."""
    t = lookup(name)
    with t.lock:
        UPDATES[update](t, t.local_rows(ids), grads, hyper)


OPS = {"pull": pull, "push": push, "apply": apply_update}


# -- sparse optimizer updates, run by the shard's owner on its rows and optimizer state ----------
# (`app.distributed.optim` sends them; the rules live here, beside the shard they change.)
# Rows are unique (the embedding sums duplicates first), so each state tensor is gathered once
# and written back once with index_copy_. The rules match `torch.optim.Adagrad` on sparse
# gradients and `torch.optim.SparseAdam`.


def _state(t: DistTensor, key: str) -> torch.Tensor:
    if not hasattr(t, "opt_state"):
        t.opt_state = {}
    if key not in t.opt_state:
        t.opt_state[key] = torch.zeros_like(t.local)
    return t.opt_state[key]


def adagrad_update(t: DistTensor, rows: torch.Tensor, grad: torch.Tensor, h: dict) -> None:
    total = _state(t, "sum")
    s = total.index_select(0, rows).addcmul_(grad, grad)
    total.index_copy_(0, rows, s)
    w = t.local.index_select(0, rows).sub_(h["lr"] * grad / s.sqrt_().add_(h["eps"]))
    t.local.index_copy_(0, rows, w)


def adam_update(t: DistTensor, rows: torch.Tensor, grad: torch.Tensor, h: dict) -> None:
    beta1, beta2 = h["betas"]
    exp_avg, exp_avg_sq = _state(t, "exp_avg"), _state(t, "exp_avg_sq")
    m = exp_avg.index_select(0, rows).lerp_(grad, 1 - beta1)
    v = exp_avg_sq.index_select(0, rows).lerp_(grad * grad, 1 - beta2)
    exp_avg.index_copy_(0, rows, m)
    exp_avg_sq.index_copy_(0, rows, v)
    step = h["step"]
    step_size = h["lr"] * math.sqrt(1 - beta2**step) / (1 - beta1**step)
    w = t.local.index_select(0, rows).sub_(step_size * m / v.sqrt_().add_(h["eps"]))
    t.local.index_copy_(0, rows, w)


UPDATES = {"adagrad": adagrad_update, "adam": adam_update}
