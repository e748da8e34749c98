"""What a process holding partition p answers over RPC: the service table, by endpoint name.

Any process that holds a partition (every sampler process; a trainer sampling in-process)
registers its stores (`endpoints.register`) BEFORE joining the RPC group, so no request can
arrive first; a PyG-style script registers after `init_rpc`, and hop / features requests that
arrive before then wait for it (`endpoints.await_registered`). The `remote_*` functions below
are the service table, every endpoint a peer can call, by name (`rpc.call_async(peer, "hop",
args)`): hop (with optional seed times), features, sample_batch (with optional seed times),
sample_edges, hot_nodes (a peer's hot-cache ranking), prepare_sampler (a loader's warm-up), tensor_pull / tensor_push / tensor_apply
(DistTensor rows, served by the process holding the shard), stats, ping, stop. They run on this
process's RPC threads against the registered stores.

The sampler process that serves them (`run_sampler`) and its lifecycle live in `workers`.
"""

from __future__ import annotations

import resource
import threading
import time
from typing import Any

from torch import Tensor

from app.distributed import endpoints, hot_cache, tensor, wire
from app.distributed.endpoints import endpoint
from app.distributed.feature_store import FeatureStoreCore
from app.distributed.graph_store import GraphStoreCore
from app.distributed.sampler import SamplerOptions, hop_stats, local_hop, sampler_for
from app.distributed.shm import SlotWriter
from app.sampler import stages
from app.sampler.output import SampledBatch
from app.sampler.stages import stage

_stop = threading.Event()
register = endpoints.register  # this process serves its stores (before joining RPC)


# -- the endpoints (what peers call, by name) ---------------------------------------------------


@endpoint("hop")
def remote_hop(
    request: wire.HopRequest, replace: bool, strategy: str = "uniform", edge_level: bool = False
) -> wire.HopReply:
    """One hop of every job of a packed request (`wire.IdWire.pack_request`: edge type, fan-out,
    seed per job; the frontiers, and seed times or None) on this partition, packed the same way;
    with seed times, no neighbour (`edge_level`: edge) later than its entry's time (temporal
    sampling)."""
    endpoints.await_registered()
    gs = endpoints.stores()[1]
    hops = local_hop(gs, wire.unpack_request(request), replace, strategy, edge_level)
    return wire.IdWire.of(gs.meta).pack_reply(hops)


@endpoint("features")
def remote_features(
    group: Any, ids: Tensor, attrs: list[str], wire_dtype: str = "store"
) -> dict[str, Tensor]:
    """Rows of `attrs` for owned global `ids`, in request order, as `wire_dtype` sends them
    (`wire.narrow_rows`: as stored unless the trainer opted in to 16-bit transit)."""
    endpoints.await_registered()
    fs = endpoints.feature_store()
    if fs is None:
        raise RuntimeError("this process serves no features (no feature store registered)")
    rows = fs.local_get(ids, group, attrs)
    return {a: wire.narrow_rows(t, wire_dtype) for a, t in rows.items()}


@endpoint("hot_nodes")
def remote_hot_nodes(group: Any, k: int) -> tuple[Tensor, Tensor]:
    """(ids, in-degrees) of this partition's `k` highest in-degree nodes of type `group`: a
    peer's hot cache ranks them (`hot_cache`)."""
    endpoints.await_registered()
    return hot_cache.hot_nodes(endpoints.stores()[1], group, k)


@endpoint("sample_batch")
def remote_sample_batch(
    options: SamplerOptions,
    seeds: Tensor,
    input_id: Tensor,
    input_type: Any,
    seed: int,
    seed_time: Tensor | None,
    slot: str | None,
) -> SampledBatch:
    """A trainer's seed batch → its sample with features, as a record the trainer builds the
    Data / HeteroData from (runs in a sampler process, which never imports PyG);
    `seed_time`: one per seed (temporal sampling); with `slot`, the features are written into
    that shared-memory ring slot."""
    alloc = SlotWriter(slot) if slot else None
    data = sampler_for(options).sample_batch(seeds, input_id, input_type, seed, alloc, seed_time)
    return _export(alloc, data)


@endpoint("prepare_sampler")
def remote_prepare_sampler(options: SamplerOptions, concurrency: int) -> None:
    """Build a trainer's sampler and what its first batches need, before it asks for any."""
    sampler_for(options).prepare(concurrency)


@endpoint("sample_edges")
def remote_sample_edges(
    options: SamplerOptions, batch: dict[str, Tensor], mode: str, seed: int, slot: str | None
) -> SampledBatch:
    """A trainer's edge batch (positives + negatives) → the record of its Data for link
    prediction."""
    alloc = SlotWriter(slot) if slot else None
    data = sampler_for(options).sample_edges(batch, mode, seed, alloc)
    return _export(alloc, data)


def _export(alloc: SlotWriter | None, data: SampledBatch) -> SampledBatch:
    """The batch as its trainer receives it: through the ring slot, or whole over RPC."""
    if alloc is None:
        return data
    with stage("handoff"):
        return alloc.export(data)


@endpoint("tensor_pull")
def remote_tensor_pull(name: str, ids: Tensor) -> Tensor:
    """Rows `ids` of the DistTensor `name` whose shard this process holds."""
    return tensor.pull(name, ids)


@endpoint("tensor_push")
def remote_tensor_push(name: str, ids: Tensor, values: Tensor) -> None:
    """Overwrite rows `ids` of the DistTensor `name` (this process holds its shard)."""
    tensor.push(name, ids, values)


@endpoint("tensor_apply")
def remote_tensor_apply(name: str, update: str, hyper: dict, ids: Tensor, grads: Tensor) -> None:
    """One sparse optimizer step (`tensor.UPDATES[update]`) on rows `ids` of DistTensor `name`."""
    tensor.apply_update(name, update, hyper, ids, grads)


@endpoint("stats")
def remote_stats() -> dict[str, float]:
    """This process so far: remote hop requests/bytes, remote feature rows/bytes and halo cache
    hits (`FeatureStoreCore.counters`), CPU seconds, minor page faults."""
    fs = endpoints.feature_store()
    requests, nbytes = hop_stats()
    return {
        "hop_requests": requests,
        "hop_bytes": nbytes,
        **(fs.counters() if fs else {}),
        "cpu_s": time.process_time(),
        **{f"stage_{name}_s": secs for name, secs in stages.snapshot().items()},
        "minflt": resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
    }


@endpoint("ping")
def remote_ping() -> bool:
    return True


@endpoint("stop")
def remote_stop() -> bool:
    _stop.set()
    return True


# -- sampler process ----------------------------------------------------------------------------


def load_stores(root: str, pid: int) -> tuple[FeatureStoreCore, GraphStoreCore]:
    """Both stores of part `pid`, sharing one (memory-mapped) load of the partition files."""
    from app.partition.reader import load_partition

    part = load_partition(root, pid)
    return FeatureStoreCore.from_partition_data(part), GraphStoreCore.from_partition_data(part)
