"""`SideStreams`: GPU-built batches made in sampling threads, each thread on a stream of its own.

The torch sampler reads sizes back from the GPU once per hop (the next arrays' lengths). On
the trainer's stream each read-back waits for everything queued there, the step's kernels
included, so sampling and the step take turns. Built on a side stream, a batch's
read-backs wait only for its own work, and the trainer's stream waits for the batch through an
event when the batch is handed over. Each tensor of the batch is then marked as used by the
trainer's stream (`record_stream`), so the caching allocator does not give its memory back to
the side stream while the step still reads it.

On the CPU (the torch sampler under `DISTGNN_KERNELS=torch`) there are no streams: `build`
calls the function and `hand_over` returns the batch as it is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor


class SideStreams:
    """One CUDA stream per calling thread on `device`, made on first use."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self._local = threading.local()

    def _stream(self) -> torch.cuda.Stream:
        stream = getattr(self._local, "stream", None)
        if stream is None:
            stream = self._local.stream = torch.cuda.Stream(self.device)
            # once: what the default stream queued before sampling (the CSC's and the
            # features' copies to the device) is there before this stream reads it
            stream.wait_stream(torch.cuda.default_stream(self.device))
        return stream

    def build(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, torch.cuda.Event | None]:
        """`fn(*args)` queued on this thread's stream, and the event that marks its end."""
        if not self.cuda:
            return fn(*args), None
        stream = self._stream()
        with torch.cuda.stream(stream):
            batch = fn(*args)
            done = torch.cuda.Event()
            done.record(stream)
        return batch, done

    def hand_over(self, built: tuple[Any, torch.cuda.Event | None]) -> Any:
        """The batch, usable on the calling thread's current stream."""
        batch, done = built
        if done is None:
            return batch
        current = torch.cuda.current_stream(self.device)
        current.wait_event(done)
        for tensor in _tensors(batch):
            if tensor.device.type == "cuda":
                tensor.record_stream(current)
        return batch


def _tensors(batch: Any) -> list[Tensor]:
    """The tensors a `Data` / `HeteroData` batch holds, in all its stores."""
    return [v for store in batch.stores for v in store.values() if isinstance(v, Tensor)]
