"""The table of RPC endpoints and what this process serves them from (its partition's stores).

Callers name an endpoint ("hop", "features", ...) instead of importing the function that
implements it (`rpc.call_async(peer, "hop", args)`): the function runs on the PEER, so the caller
never needs its module, and the modules that call (stores, sampler) and the one that implements
the endpoints (`server`) do not import each other. `server` fills the table when it is
imported; every process that serves a partition imports it.

This module imports nothing from `app.distributed`: it is the bottom layer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

REGISTER_WAIT_S = 120.0  # how long a request waits for this process to register its stores

_table: dict[str, Callable] = {}
_service: dict[str, Any] = {}
_registered = threading.Event()


def endpoint(name: str) -> Callable[[Callable], Callable]:
    """Register the decorated function as endpoint `name`."""

    def add(fn: Callable) -> Callable:
        _table[name] = fn
        return fn

    return add


def dispatch(name: str, *args: Any) -> Any:
    """Run endpoint `name` (what every RPC executes on the peer)."""
    fn = _table.get(name)
    if fn is None:
        raise RuntimeError(f"no RPC endpoint {name!r} here (serves {sorted(_table)})")
    return fn(*args)


def register(feature_store: Any, graph_store: Any, router: Any) -> None:
    """Make this process answer hop / feature / batch requests for its partition."""
    feature_store.router = feature_store.router or router
    _service.update(fs=feature_store, gs=graph_store, router=router)
    _registered.set()


def serve_features(feature_store: Any, router: Any) -> None:
    """Make this process answer feature requests from `feature_store` (PyG's
    `set_rpc_router`: a process that holds features but no graph)."""
    _service.update(fs=feature_store, router=router)
    _registered.set()


def await_registered(timeout_s: float = REGISTER_WAIT_S) -> None:
    """Wait until this process serves its stores (bounded), so an early request is answered.

    The launcher's processes register before joining the RPC group, but a PyG-style script
    calls `init_rpc` first and builds its stores / loader after: a peer whose loader is built
    sooner (its halo cache fill, its first hop) can then ask this process before it has
    anything to serve. Such a request waits here instead of failing the peer's job."""
    if not _registered.wait(timeout_s):
        raise RuntimeError(
            f"this process registered no partition stores within {timeout_s:.0f} s of a peer's "
            "request: build the stores / loader on every rank after init_rpc"
        )


def stores() -> tuple[Any, Any]:
    """(FeatureStoreCore, GraphStoreCore) this process serves (or their PyG faces)."""
    if "gs" not in _service:
        raise RuntimeError("this process holds no partition (no stores registered)")
    return _service["fs"], _service["gs"]


def router() -> Any:
    return _service.get("router")


def feature_store() -> Any:
    """The FeatureStoreCore this process serves, or None."""
    return _service.get("fs")
