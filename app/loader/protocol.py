"""`TrainLoader`: what the training loop and the evaluators ask of a loader, local or not.

One protocol, implemented by `app.loader`'s loaders, `app.distributed`'s and the trainer's
device wrapper (`app.task.device.DeviceLoader`), so the loop calls methods instead of probing
for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol


class TrainLoader(Protocol):
    """Epochs of batches, numbered so that a resumed job samples what the uninterrupted one
    would have."""

    epoch: int  # epochs started; the next `iter()` runs epoch `epoch` (set it to resume)

    @property
    def num_inputs(self) -> int:
        """Seeds (nodes, or links for link loaders) this loader cuts into batches."""
        ...

    def __len__(self) -> int:
        """Batches per epoch."""
        ...

    def __iter__(self) -> Iterator[Any]:
        """The batches of epoch `epoch` (then `epoch` is one more)."""
        ...

    def prefetch(self) -> None:
        """Start sampling the next epoch's first batches now (a no-op where nothing runs ahead)."""
        ...

    def data_stats(self) -> dict[str, float]:
        """Remote traffic since the last call (feature_rows, feature_bytes, cache_hits,
        hop_bytes, ...); empty for a loader that fetches nothing remote."""
        ...

    def close(self) -> None:
        """Release threads, shared memory and RPC shares (idempotent)."""
        ...
