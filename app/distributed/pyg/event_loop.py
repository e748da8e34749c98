"""PyG's `torch_geometric.distributed.event_loop`: an asyncio loop on a daemon thread that runs
at most `concurrency` coroutines at once, and `to_asyncio_future` for torch futures.

This package's sampler does not use it (its loaders keep a bounded window of RPC futures); it
is here for code written against PyG's sampler API. Unlike PyG's, a failed `add_task` is not
only logged: `wait_all` raises the first failure.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import torch


def to_asyncio_future(future: torch.futures.Future) -> asyncio.Future:
    """An asyncio future (of the running loop) completed when the torch `future` is."""
    loop = asyncio.get_event_loop()
    out = loop.create_future()

    def done(_: Any) -> None:
        try:
            value = future.wait()
        except Exception as err:
            loop.call_soon_threadsafe(out.set_exception, err)
        else:
            loop.call_soon_threadsafe(out.set_result, value)

    future.add_done_callback(done)
    return out


class ConcurrentEventLoop:
    """Run coroutines on one background loop, `concurrency` of them at a time."""

    def __init__(self, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency={concurrency}: pass at least 1")
        self._concurrency = concurrency
        self._sem = threading.BoundedSemaphore(concurrency)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="pyg-event-loop"
        )
        self._errors: list[BaseException] = []

    def start_loop(self) -> None:
        if not self._thread.is_alive():
            self._thread.start()

    def wait_all(self) -> None:
        """Wait until no task runs; raise the first failure of an `add_task` task, if any."""
        for _ in range(self._concurrency):
            self._sem.acquire()
        for _ in range(self._concurrency):
            self._sem.release()
        if self._errors:
            raise self._errors.pop(0)

    def add_task(self, coro: Coroutine, callback: Callable[[Any], Any] | None = None) -> None:
        """Start `coro` (blocks while `concurrency` tasks run); `callback(result)` when done."""

        def done(fut: Any) -> None:
            try:
                result = fut.result()
                if callback is not None:
                    callback(result)
            except BaseException as err:
                self._errors.append(err)
            finally:
                self._sem.release()

        self._sem.acquire()
        asyncio.run_coroutine_threadsafe(coro, self._loop).add_done_callback(done)

    def run_task(self, coro: Coroutine) -> Any:
        """Run `coro` on the loop and return its result (its exception is raised here)."""
        with self._sem:
            return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        """Stop the loop thread (pending tasks are abandoned)."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
