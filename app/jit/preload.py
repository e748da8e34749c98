"""numba's set-up, started in the background as soon as a process loads a partition.

The first kernel call of a process, even with every kernel cached, first imports numba's CPU
target registries (about 180 modules: `numba.np.arraymath` with its BLAS probe, the random
generators, ...). In a loader's forked sampler process that import sat on the first batch's
path, after the RPC group had formed. `start()` runs it on a thread of the process that loads a
partition (`LocalGraphStore.from_partition`: it will sample, or fork the processes that do),
beside the script's own set-up (loading its stores, joining its process group). Every fork of
the process first waits for the thread (`os.register_at_fork`), so a forked sampler inherits the
loaded registries and no fork copies an import half done.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("distgnn")

FORK_WAIT_S = 120.0  # a fork waits this long at most (then copies the import as it stands)

_lock = threading.Lock()
_thread: threading.Thread | None = None


def _load() -> None:
    try:
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.registry import cpu_target

        with global_compiler_lock:  # what a kernel call of another thread would take first
            cpu_target.target_context.refresh()
    except Exception as err:  # the first kernel call loads them itself and reports the error
        log.debug("numba preload failed: %s: %s", type(err).__name__, err)


def start() -> None:
    """Load numba's target registries on a background thread (once per process)."""
    global _thread
    with _lock:
        if _thread is not None:
            return
        _thread = threading.Thread(target=_load, name="distgnn-numba-preload", daemon=True)
        os.register_at_fork(before=wait)
        _thread.start()


def wait(timeout_s: float = FORK_WAIT_S) -> None:
    """Until the registries are loaded (at once if `start` was not called)."""
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout_s)
