"""PyG's `torch_geometric.distributed.dist_neighbor_sampler`: `DistNeighborSampler` with PyG's
constructor `(current_ctx, data, num_neighbors, ...)` and its entry points, over our sampler.

PyG's script drives a sampler by hand: `init_rpc`, then `init_sampler_instance()`,
`register_sampler_rpc()`, an `event_loop` (`ConcurrentEventLoop`) that runs the coroutines
`node_sample` / `edge_sample` / `sample_one_hop`. Here those are thin: every sample is drawn by
`app.distributed.sampler.DistNeighborSampler` (one batched RPC per remote partition per hop),
seeds and link bookkeeping (negatives, `edge_label_index`, seed times) are PyG's own
`node_sample` / `edge_sample`, so outputs have PyG's layout and metadata.

PyG's loaders (`app.distributed.pyg.loader`) build this class too (`loader.dist_sampler` is
one), with the loader's context or None for a loader without one; the engine's own loaders
take `app.distributed.sampler.DistNeighborSampler` itself (`app.task.partitioned`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.sampler import (
    EdgeSamplerInput,
    HeteroSamplerOutput,
    NegativeSampling,
    NodeSamplerInput,
    SamplerOutput,
)
from torch_geometric.sampler.neighbor_sampler import edge_sample, node_sample

from app.distributed import endpoints, rpc
from app.distributed import server as _server  # noqa: F401  (serves the "hop" endpoint)
from app.distributed.context import DistContext
from app.distributed.graph_store import GraphStoreCore
from app.distributed.pyg.event_loop import ConcurrentEventLoop
from app.distributed.pyg.feature_store import LocalFeatureStore
from app.distributed.pyg.graph_store import LocalGraphStore
from app.distributed.sampler import DistNeighborSampler as _Sampler
from app.distributed.sampler import SamplerOptions
from app.sampler.output import Sample

__all__ = ["DistNeighborSampler"]

Output = SamplerOutput | HeteroSamplerOutput
_OPTIONS = {f.name for f in fields(SamplerOptions)}


class DistNeighborSampler(_Sampler):
    """Our distributed sampler under PyG's constructor and async entry points."""

    def __init__(
        self,
        current_ctx: DistContext | None,
        data: tuple[LocalFeatureStore, LocalGraphStore],
        num_neighbors: Any,
        replace: bool = False,
        subgraph_type: str = "directional",
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        time_attr: str | None = None,
        concurrency: int = 1,
        device: Any = None,
        **kwargs: Any,
    ) -> None:
        if current_ctx is not None and not isinstance(current_ctx, DistContext):
            raise TypeError(
                f"current_ctx={current_ctx!r}: PyG's DistNeighborSampler takes "
                "(current_ctx, data, num_neighbors, ...); pass a DistContext first"
            )
        options = SamplerOptions(
            num_neighbors,
            replace=replace,
            subgraph_type=subgraph_type,
            disjoint=disjoint,
            temporal_strategy=temporal_strategy,
            time_attr=time_attr,
            **{k: v for k, v in kwargs.items() if k in _OPTIONS},  # ours beyond PyG's
        )  # PyG's options one by one → the one record our sampler takes
        super().__init__(data, options=options, router=kwargs.get("router"))
        self.current_ctx = current_ctx
        self.concurrency = concurrency
        self.device = device
        self.event_loop: ConcurrentEventLoop | None = None

    # -- PyG's set-up steps -------------------------------------------------------------------

    def init_sampler_instance(self) -> None:
        """PyG's: build what sampling needs locally (relabelers, kernels) before serving."""
        self.prepare(self.concurrency)

    def register_sampler_rpc(self) -> None:
        """PyG's: serve this partition's hops to peers, then learn who serves each partition
        (a gather over the whole group: once every process returns, every one serves)."""
        gs = self.graph_store
        endpoints.register(self.feature_store, gs, None)
        table = rpc.rpc_partition_to_workers(self.current_ctx, gs.num_partitions, gs.partition_idx)
        self.router = rpc.RPCRouter(table)
        self.feature_store.router = self.router
        endpoints.register(self.feature_store, gs, self.router)

    def init_event_loop(self) -> None:
        """PyG's: start `event_loop` (a `ConcurrentEventLoop` of `concurrency` tasks)."""
        if self.event_loop is None:
            self.event_loop = ConcurrentEventLoop(self.concurrency)
        self.event_loop.start_loop()

    # -- PyG's coroutines ---------------------------------------------------------------------

    async def node_sample(self, inputs: NodeSamplerInput) -> Output:
        """PyG's: the multi-hop sample of `inputs` (global ids; `time`: per-seed times)."""
        return await _off_loop(node_sample, inputs, self._sample)

    async def edge_sample(
        self,
        inputs: EdgeSamplerInput,
        sample_fn: Callable | None,
        num_nodes: int | dict[str, int],
        disjoint: bool,
        node_time: Tensor | dict[str, Tensor] | None = None,
        neg_sampling: NegativeSampling | None = None,
    ) -> Output:
        """PyG's: the sample around every link endpoint (and negatives), with PyG's link
        metadata. `sample_fn` must be this sampler's `node_sample` (PyG's call passes it)."""
        if sample_fn is not None and getattr(sample_fn, "__self__", self) is not self:
            raise ValueError(
                f"sample_fn={sample_fn!r}: this sampler samples with its own node_sample; "
                "pass sampler.node_sample (or None)"
            )
        return await _off_loop(
            edge_sample, inputs, self._sample, num_nodes, disjoint, node_time, neg_sampling
        )

    async def sample_one_hop(
        self,
        srcs: Tensor,
        one_hop_num: int,
        seed_time: Tensor | None = None,
        src_batch: Tensor | None = None,
        edge_type: tuple[str, str, str] | None = None,
    ) -> SamplerOutput:
        """PyG's: up to `one_hop_num` in-neighbours of every global id in `srcs`, across
        partitions. `node`: neighbours, `edge`: their edge ids, `batch`: each neighbour's
        `src_batch` entry, `metadata`: (neighbours per source as a list, PyG's form)."""
        job = (
            edge_type,
            srcs.numpy(),
            int(one_hop_num),
            0,
            None if seed_time is None else np.ascontiguousarray(seed_time.numpy()),
        )
        dst_type = None if edge_type is None else edge_type[-1]
        nbrs, eids, counts = (await _off_loop(self.sample_jobs, [job], [dst_type]))[0]
        batch = None if src_batch is None else src_batch.repeat_interleave(torch.from_numpy(counts))
        return SamplerOutput(
            node=torch.from_numpy(nbrs),
            row=None,
            col=None,
            edge=torch.from_numpy(eids),
            batch=batch,
            metadata=(counts.tolist(),),
        )

    # -- PyG's sample function: seeds (and times) → our sampler ---------------------------------

    def _sample(self, seed: Tensor | dict[str, Tensor], seed_time: Any = None) -> Output:
        """What PyG's `node_sample` / `edge_sample` call; without seed times, a node-level
        temporal sample uses each seed's own time (PyG's and pyg-lib's rule)."""
        if self.temporal and seed_time is None and not self.edge_level:
            seed_time = _own_time(self.graph_store, seed)
        return _pyg_output(self.sample_from_nodes(seed, None, 0, seed_time))


def _pyg_output(out: Sample) -> SamplerOutput | HeteroSamplerOutput:
    """Our sampler's `Sample` as PyG's `SamplerOutput` / `HeteroSamplerOutput` (same fields)."""
    cls = HeteroSamplerOutput if isinstance(out.node, dict) else SamplerOutput
    return cls(**{f.name: getattr(out, f.name) for f in fields(Sample)})


async def _off_loop(fn: Callable, *args: Any) -> Any:
    """Run the blocking `fn(*args)` on a thread, so the event loop keeps serving other tasks."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def _own_time(gs: GraphStoreCore, seed: Tensor | dict[str, Tensor]) -> Any:
    """Each seed's own node time (by global id)."""
    if isinstance(seed, dict):
        return {t: gs.node_time(t)[ids] for t, ids in seed.items()}
    return gs.node_time(None)[seed]
