"""`DeviceLoader`: batches from a CPU loader, copied to the trainer's device one step ahead.

Which device that is comes from `app.placement`. On cuda each batch is pinned and copied with
`non_blocking=True` on a side stream while the previous step computes (a batch a GPU sampler
built is taken once the step before it is queued); the side stream waits for what the compute
stream queued before each pass (the resident table's copy), the compute stream waits for each
copy, and the batch's tensors are recorded on it, so the caching allocator never reuses them
early. On the CPU the loader is passed through unchanged and CUDA is never touched.

A distributed trainer that holds rows on its device (`app.distributed.resident.DeviceRows`)
gets batches carrying only the other rows; each is filled there after its copy (on the CPU,
under `DISTGNN_KERNELS=torch`, in host memory), and the share of rows read from the table is
logged after every pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import torch

from app.distributed.resident import DeviceRows, Tally
from app.loader.protocol import TrainLoader


class DeviceLoader:
    """Iterates `loader` with every batch on `device` (prefetching one batch on cuda); the rest
    of `TrainLoader` is the wrapped loader's."""

    def __init__(
        self, loader: TrainLoader, device: torch.device, rows: DeviceRows | None = None
    ) -> None:
        self.loader, self.device, self.rows = loader, device, rows
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.tally = Tally()

    def __len__(self) -> int:
        return len(self.loader)

    @property
    def num_inputs(self) -> int:
        return self.loader.num_inputs

    def prefetch(self) -> None:
        self.loader.prefetch()

    def data_stats(self) -> dict[str, float]:
        return self.loader.data_stats()

    def close(self) -> None:
        self.loader.close()

    @property
    def epoch(self) -> int:
        """Epochs the wrapped loader has started (its shuffle and sampling seeds follow it)."""
        return int(self.loader.epoch)

    @epoch.setter
    def epoch(self, value: int) -> None:
        self.loader.epoch = int(value)

    def _copy(self, batch: Any) -> Any:
        if batch is None:
            return batch
        if self.rows is not None:
            self.tally.add(batch)
        # the CPU: no stream, nothing to copy (`torch.cuda.stream(None)` would start CUDA on
        # a machine that has it)
        with nullcontext() if self.stream is None else torch.cuda.stream(self.stream):
            if self.stream is not None:  # a GPU sampler's tensors are there already
                batch = batch.apply(_pinned).to(self.device, non_blocking=True)
            if self.rows is not None:
                self.rows.fill(batch)
        return batch

    def __iter__(self) -> Iterator[Any]:
        yield from self._pass()
        if self.rows is not None:
            self.tally.log(f"resident rows after epoch {self.epoch - 1}", self.rows)

    def _pass(self) -> Iterator[Any]:
        if self.stream is None:
            yield from (self._copy(batch) for batch in self.loader)
            return
        # the copies and fills read what the trainer's stream wrote (the resident table)
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        batches = iter(self.loader)
        first = next(batches, None)
        # a batch a GPU sampler built is taken after the step before it is queued: taking it
        # queues a wait for its build (`SideStreams.hand_over`) that would hold up that step
        host_built = first is not None and not first.is_cuda
        ahead = self._copy(first)
        while ahead is not None:
            current = ahead
            compute = torch.cuda.current_stream(self.device)
            compute.wait_stream(self.stream)
            current.record_stream(compute)
            if host_built:
                ahead = self._copy(next(batches, None))  # sampled + copied while `current` runs
                yield current
            else:
                yield current
                ahead = self._copy(next(batches, None))


def _pinned(t: torch.Tensor) -> torch.Tensor:
    return t.pin_memory() if t.device.type == "cpu" else t
