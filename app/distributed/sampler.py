"""`DistNeighborSampler`: multi-hop neighbour sampling over a partitioned graph.

Per hop, the frontier (global ids) is split by owning partition. Requests for every remote
partition are sent first — ONE call per remote partition per hop, carrying every edge type of the
hop — then the local part is sampled with the numba kernel while those calls are in flight, and
the answers are merged back in frontier order. De-duplication and relabelling use the local
sampler's `Relabeler` (disjoint too), and the kernel draws per (hop seed, node), so a seeded
distributed sample equals the single-machine sample of the unpartitioned graph, id for id.
Features and labels of the sampled nodes come from `FeatureStoreCore.fetch` (local rows + one
batched call per remote partition).

Temporal sampling (`time_attr`): as in the local sampler it is disjoint, and every frontier
entry carries its seed's time to the partition that owns it, which keeps only neighbours not
later than that time. Node-level (`time`: the graph store holds every node's time, halo
included; source node types without a time are not filtered, as in the local sampler) or
edge-level (any other name: the owning partition's graph store holds its edges' times, PyG's
`edge_time`; edge types without a time are not filtered). Times that PyG's stores keep in the
feature store are copied into the graph store first (`times_to_graph_store`).

The sampler serves its own partition to peers through `local_hop` (the "hop" endpoint, with or
without seed times; see `server`), and a sampler process runs trainers' batches on `sampler_for`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch
from torch import Tensor

from app.config import SamplerConfig
from app.distributed import endpoints, rpc, wire
from app.distributed.feature_store import FeatureStoreCore
from app.distributed.graph_store import GraphStoreCore
from app.distributed.resident import ResidentRows, holdable_attrs
from app.distributed.routing import HopResult, merge_ragged, route, split_by_owner, take
from app.sampler.kernel import STRATEGIES, Relabeler, derive_seed, hop_seed, sample_hop, warmup
from app.sampler.output import Sample, SampledBatch
from app.sampler.stages import stage

EdgeType = tuple[str, str, str]
# (edge type or None, frontier global ids, fan-out, seed, seed time per frontier entry or None)
Job = tuple[Any, np.ndarray, int, int, np.ndarray | None]


_samplers: dict[str, Any] = {}  # this process's samplers by spec (see `sampler_for`)
_samplers_lock = threading.Lock()


@dataclass(frozen=True)
class SamplerOptions:
    """Everything that defines a sampler's behaviour, in one frozen record.

    Built once — from `cfg.sampler` (`from_config`), or where PyG's public `Dist*` façade takes
    the options one by one — and passed whole by keyword: to `DistNeighborSampler`, and with
    each batch to the sampler processes (its `key` names their built sampler). `num_neighbors`
    is stored frozen (tuples; PyG's "src__rel__dst" keys become edge-type tuples).
    """

    num_neighbors: Any  # list[int], or {edge type: list[int]}
    replace: bool = False
    subgraph_type: str = "directional"
    disjoint: bool = False
    temporal_strategy: str = "uniform"
    time_attr: str | None = None
    attrs: tuple[str, ...] | None = None  # node attributes to gather (None: all)
    feature_cache_size: int = 0  # halo feature cache rows (0: off)
    hot_cache_bytes: int = 0  # hot-node feature cache bytes (0: off; see `hot_cache`)
    feature_wire_dtype: str = "store"  # remote features in transit (see `wire.feature_dtype`)
    resident_rows: int = 0  # rows its trainer holds on its device (`resident`; 0: none)

    def __post_init__(self) -> None:
        wire.feature_dtype(self.feature_wire_dtype)  # an unknown name: one line, now
        object.__setattr__(self, "num_neighbors", _freeze(self.num_neighbors))
        if self.attrs is not None:
            object.__setattr__(self, "attrs", tuple(self.attrs))

    @classmethod
    def from_config(cls, s: SamplerConfig) -> SamplerOptions:
        """The options `cfg.sampler` sets: every field of both records, by name (`attrs`, not
        a config key, stays None: every node attribute gathered)."""
        given = {f.name for f in fields(s)}
        return cls(**{f.name: getattr(s, f.name) for f in fields(cls) if f.name in given})

    def fanouts(self) -> list[int] | dict[EdgeType, list[int]]:
        """`num_neighbors` as PyG takes it: a list, or a dict of lists per edge type."""
        return _thaw(self.num_neighbors)

    def as_kwargs(self) -> dict[str, Any]:
        """The options as the keyword arguments of PyG's `Dist*Loader` constructors."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**out, "num_neighbors": self.fanouts()}

    def key(self) -> str:
        return repr(self)


@dataclass
class HopStats:
    """Remote traffic counters (requests, bytes) for the bench."""

    requests: int = 0
    bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, requests: int, nbytes: int) -> None:
        with self.lock:
            self.requests += requests
            self.bytes += nbytes


class DistNeighborSampler:
    """Neighbour sampler over (FeatureStoreCore, GraphStoreCore) with remote hops by RPC."""

    def __init__(
        self,
        data: tuple[FeatureStoreCore, GraphStoreCore],
        *,
        options: SamplerOptions,
        router: rpc.RPCRouter | None = None,
    ) -> None:
        o = options
        self.feature_store, self.graph_store = data
        times_to_graph_store(self.feature_store, self.graph_store, o.time_attr)
        num_neighbors = o.fanouts()
        if o.subgraph_type != "directional":
            raise ValueError(
                f"subgraph_type={o.subgraph_type!r}: the distributed sampler supports "
                "'directional' only; use sampler.subgraph_type=directional"
            )
        self.temporal = _check_temporal(self.graph_store, o.time_attr, o.temporal_strategy)
        self.edge_level = self.temporal and o.time_attr != "time"
        disjoint = o.disjoint or self.temporal  # temporal sampling is disjoint, as locally
        self.options = dataclasses.replace(o, disjoint=disjoint)
        self.replace, self.disjoint, self.strategy = o.replace, disjoint, o.temporal_strategy
        self.num_hops = self._check_fanouts(num_neighbors)
        self.num_neighbors = num_neighbors
        self.router = router
        self.feature_store.router = self.feature_store.router or router
        self.feature_store.use_cache(o.feature_cache_size, self.graph_store, o.hot_cache_bytes)
        if o.resident_rows and (self.temporal or not holdable_attrs(self.feature_store)):
            raise ValueError(
                f"resident_rows={o.resident_rows}: a trainer holds rows of homogeneous graphs "
                "without times only; leave resident_rows=0"
            )
        self._resident: ResidentRows | None = None  # built on first use (`resident`)
        self.partition_idx = self.graph_store.partition_idx
        self.stats = HopStats()
        self.wire = wire.IdWire.of(self.graph_store.meta)  # id widths on the wire, fixed once
        self._free: dict[Any, list[Relabeler]] = {}  # reset relabelers, per node type
        self._free_lock = threading.Lock()

    def _check_fanouts(self, num_neighbors: Any) -> int:
        gs = self.graph_store
        if gs.is_hetero != isinstance(num_neighbors, dict):
            if gs.is_hetero and not isinstance(num_neighbors, dict):
                return len(num_neighbors)  # one list for every edge type
            raise ValueError(
                f"num_neighbors={num_neighbors!r}: a dict per edge type needs a heterogeneous graph"
            )
        if isinstance(num_neighbors, dict):
            unknown = set(num_neighbors) - set(gs.edge_types)
            if unknown:
                raise ValueError(f"num_neighbors names unknown edge types {sorted(unknown)}")
            lengths = {len(v) for v in num_neighbors.values()}
            if len(lengths) != 1:
                raise ValueError(
                    f"num_neighbors={num_neighbors!r}: every edge type needs the same number of hops"
                )
            return lengths.pop()
        return len(num_neighbors)

    def fanout(self, edge_type: EdgeType | None, hop: int) -> int:
        nn = self.num_neighbors
        if isinstance(nn, dict):
            return int(nn.get(edge_type, [0] * self.num_hops)[hop])
        return int(nn[hop])

    # -- one hop, all partitions --------------------------------------------------------------

    def sample_jobs(self, jobs: Sequence[Job], node_types: Sequence[Any]) -> list[HopResult]:
        """Sample each job's frontier across partitions; results in frontier order.

        `node_types[i]` is the destination node type of job i (None when homogeneous): it
        decides which partition owns each frontier node. Remote partitions get one call each
        (all of the hop's jobs for that partition), sent before the local part is sampled, so
        local and remote work overlap.
        """
        with stage("route"):  # the local part's kernel counts as "kernel"
            return self._sample_jobs(jobs, node_types)

    def _sample_jobs(self, jobs: Sequence[Job], node_types: Sequence[Any]) -> list[HopResult]:
        gs = self.graph_store
        splits = [
            split_by_owner(gs.owner(job[1], t)) for job, t in zip(jobs, node_types, strict=False)
        ]
        present = sorted({p for sp in splits for p in sp})
        if self.router is None and set(present) - {self.partition_idx}:
            raise RuntimeError(f"frontier nodes on partitions {present} but no RPC router is set")
        work = {p: _subjobs(jobs, splits, p) for p in present}
        results = route(work, {self.partition_idx}, self._call_hop, self._run_hop)
        merged = []
        for i, job in enumerate(jobs):
            pieces = [
                (splits[i][p], results[p][_pos(splits, i, p)]) for p in present if p in splits[i]
            ]
            merged.append(merge_ragged(pieces, job[1].size))
        return merged

    def _call_hop(self, part: int, sub: list) -> rpc.PendingCall:
        """Start one hop of `sub` (this hop's jobs, cut to `part`'s frontier) on `part`, packed
        (`wire`: every frontier in one array, ids as narrow as the id space allows)."""
        request = self.wire.pack_request(sub)
        self.stats.add(1, wire.nbytes(request[1:]))
        args = (request, self.replace, self.strategy, self.edge_level)
        sizes = [n for *_, n in request[0]]
        return _HopCall(rpc.call_partition(self.router, part, "hop", args), self.stats, sizes)

    def _run_hop(self, _: int, sub: list) -> list[HopResult]:
        return local_hop(self.graph_store, sub, self.replace, self.strategy, self.edge_level)

    # -- multi-hop ----------------------------------------------------------------------------

    def _types(self) -> tuple[list[Any], list[Any]]:
        """(edge types, node types) of the graph; `[None]` each when it is homogeneous."""
        gs = self.graph_store
        if not gs.is_hetero:
            return [None], [None]
        return list(gs.edge_types), list(gs.meta["node_types"])

    def _take_relabelers(self, node_types: list[Any]) -> dict[Any, Relabeler]:
        """A relabeler per node type (dense O(N) maps) from the free list, new ones only when
        every free one is in use: as many exist as batches were ever sampled at once, not one
        per RPC thread that happened to serve a batch (each costs O(N) memory to create)."""
        with self._free_lock:
            free = self._free
            out = {t: free[t].pop() if free.get(t) else None for t in node_types}
        gs = self.graph_store
        return {  # `is None`: a reset relabeler has len 0, so `r or ...` would never reuse it
            t: Relabeler(gs.num_nodes(t), self.disjoint) if r is None else r for t, r in out.items()
        }

    def prepare(self, concurrency: int) -> None:
        """Do now what the first batches would: a relabeler per batch in flight, the feature
        store's halo cache and id maps — so a loader's first epoch does not wait for them."""
        etypes, ntypes = self._types()
        sets = [self._take_relabelers(ntypes) for _ in range(max(1, concurrency))]
        for rels in sets:
            self._give_back(rels)
        self.feature_store.prepare()
        self.resident()
        warmup()  # the sampling kernels, loaded before the first batch needs them ...
        empty = np.empty(0, np.int64)  # ... for this partition's index dtypes too
        local_hop(self.graph_store, [(et, empty, 1, 0) for et in etypes], self.replace)

    def _give_back(self, rels: dict[Any, Relabeler]) -> None:
        """Reset `rels` (O(#touched)) and return them to the free list."""
        for rel in rels.values():
            rel.reset()
        with self._free_lock:
            for t, rel in rels.items():
                self._free.setdefault(t, []).append(rel)

    def sample_from_nodes(
        self,
        seeds: Tensor | dict[str, Tensor],
        input_type: str | None = None,
        seed: int = 0,
        seed_time: Tensor | None = None,
    ) -> Sample:
        """Sample the multi-hop neighbourhood of global `seeds` (PyG's output fields).

        `seeds`: ids of `input_type`, or {node type: ids} (hetero link batches seed both end
        types). `seed` seeds the kernel exactly like the single-machine sampler
        (`hop_seed(seed, hop)` per hop, a stream per node), so both draw the same sample from
        the same graph. `seed_time` (temporal sampling only, one per seed; {node type: times}
        with dict seeds): no neighbour later than it is drawn.
        """
        if isinstance(seeds, dict):
            times = self._seed_time_dict(seeds, seed_time)
        else:
            times = self._seed_times(seeds, seed_time)
            seeds = {input_type: seeds}
        etypes, ntypes = self._types()
        rels = self._take_relabelers(ntypes)
        try:
            seeds = {t: s.numpy() for t, s in seeds.items()}
            with stage("relabel"):  # hops inside count as "route" and "kernel"
                out = self._grow(seeds, seed, etypes, ntypes, rels, times)
                nodes = {t: rels[t].nodes.copy() for t in ntypes}
                batch = {t: rels[t].batch.copy() for t in ntypes} if self.disjoint else None
        finally:
            self._give_back(rels)
        with stage("assembly"):
            return self._output(nodes, batch, out)

    def _output(self, nodes: dict, batch: dict | None, out: tuple) -> Sample:
        """The sample of `_grow`'s lists and the relabelers' node ids."""
        rows, cols, eids, nsn, nse = out
        t64 = torch.from_numpy
        if not self.graph_store.is_hetero:
            edge_index = t64(_pair(rows[None], cols[None]))
            return Sample(
                node=t64(nodes[None]),
                row=edge_index[0],
                col=edge_index[1],
                edge=t64(_cat(eids[None])),
                batch=None if batch is None else t64(batch[None]),
                num_sampled_nodes=nsn[None],
                num_sampled_edges=nse[None],
            )
        return Sample(
            node={t: t64(n) for t, n in nodes.items()},
            row={et: t64(_cat(v)) for et, v in rows.items()},
            col={et: t64(_cat(v)) for et, v in cols.items()},
            edge={et: t64(_cat(v)) for et, v in eids.items()},
            batch=None if batch is None else {t: t64(b) for t, b in batch.items()},
            num_sampled_nodes=nsn,
            num_sampled_edges=nse,
        )

    def _seed_time_dict(self, seeds: dict[Any, Tensor], seed_time: Any) -> np.ndarray | None:
        """Seed times of dict seeds, in tree order (types in dict order, as `_grow` counts)."""
        if not self.temporal:
            return None
        if not isinstance(seed_time, dict) or set(seed_time) != set(seeds):
            raise ValueError(
                f"temporal sampling of seeds of types {sorted(seeds)} needs seed_time as "
                "{node type: one time per seed} for the same types"
            )
        return _cat([self._seed_times(s, seed_time[t]) for t, s in seeds.items()])

    def _seed_times(self, seeds: Tensor, seed_time: Tensor | None) -> np.ndarray | None:
        if not self.temporal:
            return None
        if seed_time is None:
            raise ValueError("temporal sampling (time_attr set) needs a seed time per seed")
        times = np.ascontiguousarray(torch.as_tensor(seed_time).numpy())
        if times.shape != (seeds.numel(),):
            raise ValueError(
                f"seed_time has shape {tuple(times.shape)} for {seeds.numel()} seeds: "
                "pass one time per seed"
            )
        return times

    def _grow(self, seeds, seed, etypes, ntypes, rels, times=None) -> tuple:
        """Hop loop: sample, relabel, record edges; the next frontier is each hop's new nodes.

        `seeds`: {node type: global ids}; disjoint tree ids count seeds across types in dict
        order, as the local sampler does. Temporal (`times`: per seed): a frontier entry's time
        is its tree's (seed's) time.
        """
        src_t = {et: et[0] if et else None for et in etypes}
        dst_t = {et: et[2] if et else None for et in etypes}
        empty = np.empty(0, np.int64)
        front = {t: (empty, empty, empty) for t in ntypes}  # (global ids, local ids, tree ids)
        offset = 0
        for t, ids in seeds.items():
            if self.disjoint:
                trees = np.arange(offset, offset + ids.size, dtype=np.int64)
                front[t] = (ids, rels[t].add(ids, trees), trees)
            else:
                front[t] = (ids, rels[t].fill(ids), empty)
            offset += ids.size
        rows, cols, eids = ({et: [] for et in etypes} for _ in range(3))
        nsn = {t: [int(front[t][0].size)] for t in ntypes}
        nse = {et: [] for et in etypes}
        for hop in range(self.num_hops):
            hs = hop_seed(seed, hop)
            todo = [et for et in etypes if front[dst_t[et]][0].size and self.fanout(et, hop) != 0]
            jobs = [
                (
                    et,
                    front[dst_t[et]][0],
                    self.fanout(et, hop),
                    derive_seed(hs, etypes.index(et)) if et else hs,
                    None if times is None else times[front[dst_t[et]][2]],
                )
                for et in todo
            ]
            results = self.sample_jobs(jobs, [dst_t[et] for et in todo])
            fresh: dict[Any, list] = {t: [] for t in ntypes}
            for et, (nbrs, eid, counts) in zip(todo, results, strict=False):
                _, dst_local, dst_tree = front[dst_t[et]]
                rel = rels[src_t[et]]
                before = len(rel)
                row, col = rel.add_hop(nbrs, counts, dst_local, dst_tree)
                rows[et].append(row)
                cols[et].append(col)
                eids[et].append(eid)
                fresh[src_t[et]].append((before, len(rel)))
            for et in etypes:
                nse[et].append(int(rows[et][-1].size) if et in todo else 0)
            for t in ntypes:
                rel, spans = rels[t], fresh[t]
                ids = _cat([rel.nodes[a:b] for a, b in spans])
                local = _cat([np.arange(a, b) for a, b in spans])
                tree = _cat([rel.batch[a:b] for a, b in spans]) if self.disjoint else empty
                front[t] = (ids, local, tree)
                nsn[t].append(int(ids.size))
        return rows, cols, eids, nsn, nse

    # -- batches ------------------------------------------------------------------------------

    def sample_batch(
        self,
        seeds: Tensor,
        input_id: Tensor,
        input_type: str | None = None,
        seed: int = 0,
        alloc: Any = None,
        seed_time: Tensor | None = None,
    ) -> SampledBatch:
        """Seeds → sampled subgraph with features and labels, for NeighborLoader's layout
        (`app.loader.batch.assemble` builds it on the trainer).

        `alloc` provides the feature arrays (see `shm.SlotWriter`); default: heap.
        `seed_time`: one time per seed (temporal sampling; kept as the batch's `seed_time`).
        """
        out = self.sample_from_nodes(seeds, input_type, seed, seed_time)
        out.metadata = (input_id, seed_time)
        return self._collate(out, input_type, False, alloc)

    def sample_edges(
        self, batch: dict[str, Any], mode: str, seed: int = 0, alloc: Any = None
    ) -> SampledBatch:
        """Link batch → subgraph around every endpoint, with PyG's link-loader fields.

        `batch`: `src`, `dst` (positives, then binary negatives), `input_id`, `edge_label`
        (binary) or `dst_neg` ([B, r], triplet), `edge_type` (hetero) and, temporal, `time`
        (`edge_label_time` of the positives). Seeds follow PyG's `edge_sample`: one seed set
        when both ends share a node type, else {source type: sources, destination type:
        destinations}; de-duplicated (sorted) unless the sampler is disjoint, where every
        endpoint is its own tree (tree ids taken modulo the number of positives) and, temporal,
        carries its link's time. So the batch equals the local loader's for the same links.
        """
        edge_type = batch.get("edge_type")
        src_t, dst_t = (None, None) if edge_type is None else (edge_type[0], edge_type[-1])
        ends = _Endpoints.of(batch, mode, self.temporal)
        sample = self._sample_disjoint_link if self.disjoint else self._sample_merged_link
        out, index = sample(ends, src_t, dst_t, seed)
        label = () if mode == "triplet" else (batch["edge_label"],)
        out.metadata = (batch["input_id"], *index, *label, ends.src_time)
        return self._collate(out, edge_type, mode, alloc)

    def _sample_merged_link(
        self, ends: _Endpoints, src_t: Any, dst_t: Any, seed: int
    ) -> tuple[Sample, tuple[Tensor, ...]]:
        """Non-disjoint: endpoints de-duplicated into sorted seeds; link indices by inverse."""
        src, dst = ends.src, ends.dst
        if src_t == dst_t:
            seeds, inverse = torch.unique(torch.cat([src, dst]), return_inverse=True)
            out = self.sample_from_nodes(seeds, src_t, seed)
            inv_src, inv_dst = inverse[: src.numel()], inverse[src.numel() :]
        else:
            src, inv_src = torch.unique(src, return_inverse=True)
            dst, inv_dst = torch.unique(dst, return_inverse=True)
            out = self.sample_from_nodes({src_t: src, dst_t: dst}, None, seed)
        return out, ends.index(inv_src, inv_dst)

    def _sample_disjoint_link(
        self, ends: _Endpoints, src_t: Any, dst_t: Any, seed: int
    ) -> tuple[Sample, tuple[Tensor, ...]]:
        """Disjoint (temporal too): a tree per endpoint, in PyG's seed order."""
        n_src, n_dst = ends.src.numel(), ends.dst.numel()
        if src_t == dst_t:
            seeds = torch.cat([ends.src, ends.dst])
            times = None if ends.src_time is None else torch.cat([ends.src_time, ends.dst_time])
            out = self.sample_from_nodes(seeds, src_t, seed, times)
            inv_src, inv_dst = torch.arange(n_src), torch.arange(n_src, n_src + n_dst)
        else:
            split = {src_t: ends.src, dst_t: ends.dst}
            times = None if ends.src_time is None else {src_t: ends.src_time, dst_t: ends.dst_time}
            out = self.sample_from_nodes(split, None, seed, times)
            inv_src, inv_dst = torch.arange(n_src), torch.arange(n_dst)
        if isinstance(out.batch, dict):
            out.batch = {t: b % ends.num_pos for t, b in out.batch.items()}
        else:
            out.batch = out.batch % ends.num_pos
        return out, ends.index(inv_src, inv_dst)

    def _collate(self, out: Sample, input_type: Any, link: Any, alloc: Any) -> SampledBatch:
        """Gather node attributes (local + remote) and edge attributes of `out`: the batch's
        record, which the trainer builds with the local loader's `to_data` / `to_hetero_data`
        (`app.loader.batch.assemble`), so both loaders emit the same layout."""
        if self.graph_store.is_hetero:
            assert isinstance(out.node, dict)
            attrs = {t: self._gather(nodes, t, alloc) for t, nodes in out.node.items()}
            edge = out.edge if isinstance(out.edge, dict) else {}
            edges = {et: self._edge_attr(e, et) for et, e in edge.items()}
            return SampledBatch(out, True, attrs, edges, input_type, link)
        assert isinstance(out.node, Tensor) and not isinstance(out.edge, dict)
        edges = self._edge_attr(out.edge, (None, None))
        resident = self.resident()
        if resident is None:
            attrs = self._gather(out.node, None, alloc)
            return SampledBatch(out, False, attrs, edges, input_type, link)
        with stage("features"):
            slot = torch.from_numpy(resident.slots(out.node.numpy()))
        attrs = self._gather(out.node[slot < 0], None, alloc)  # the rows its trainer lacks
        return SampledBatch(out, False, attrs, edges, input_type, link, resident=slot)

    def resident(self) -> ResidentRows | None:
        """The rows this sampler's trainer holds on its device (`options.resident_rows`; None:
        it holds none), indexed once (after the feature store's caches, which it includes)."""
        k = self.options.resident_rows
        if k and self._resident is None:
            with self._free_lock:
                if self._resident is None:
                    self._resident = ResidentRows(self.feature_store, self.graph_store, k)
        return self._resident

    def node_attrs(self, group: Any) -> list[str]:
        """The attributes of node type `group` a batch gathers (`options.attrs`, else all)."""
        held = self.feature_store.attr_names(group)
        return held if self.options.attrs is None else [a for a in self.options.attrs if a in held]

    def _edge_attr(self, e_id: Tensor | None, group: Any) -> dict[str, Tensor]:
        """PyG's `edge_attr` of the sampled edges (global ids; remote rows by RPC), when the
        partition holds edge features (not written into shared memory: edges are few)."""
        if e_id is None or "edge_attr" not in self.feature_store.attr_names(group):
            return {}
        with stage("labels"):
            return self.feature_store.fetch(e_id.long(), group, ["edge_attr"], cache=False)

    def _gather(self, nodes: Tensor, group: Any, alloc: Any) -> dict[str, Tensor]:
        attrs = self.node_attrs(group)
        with stage("features"):  # labels and masks too: one fetch gathers every attribute
            return self.feature_store.fetch(
                nodes, group, attrs, alloc=alloc, wire_dtype=self.options.feature_wire_dtype
            )


@dataclass(frozen=True)
class _Endpoints:
    """A link batch's seeds in PyG's order: sources, then destinations (positives, then
    negatives: triplet negative q of positive i at `n + q*n + i`, as PyG lays them), and the
    times their trees sample at (temporal; binary negatives take their positives' in turn)."""

    src: Tensor
    dst: Tensor
    src_time: Tensor | None
    dst_time: Tensor | None
    num_pos: int
    neg_per_pos: int | None  # triplet: negatives per positive; None: binary

    @classmethod
    def of(cls, batch: dict[str, Any], mode: str, temporal: bool) -> _Endpoints:
        src, dst, n = batch["src"], batch["dst"], int(batch["input_id"].numel())
        time = batch.get("time") if temporal else None
        if temporal and time is None:
            raise ValueError("temporal link sampling needs one time per link: pass edge_label_time")
        if mode == "triplet":
            neg = batch["dst_neg"]
            r = int(neg.size(1))
            dst = torch.cat([dst, neg.t().reshape(-1)])
            dst_time = None if time is None else time.repeat(1 + r)
            return cls(src, dst, time, dst_time, n, r)
        total = src.numel()
        rep = None if time is None else time.repeat(-(-total // max(n, 1)))[:total]
        return cls(src, dst, rep, rep, n, None)

    def index(self, inv_src: Tensor, inv_dst: Tensor) -> tuple[Tensor, ...]:
        """PyG's link fields from each endpoint's position among the sampled seeds:
        (edge_label_index,) binary, (src_index, dst_pos_index, dst_neg_index) triplet."""
        n, r = self.num_pos, self.neg_per_pos
        if r is None:
            return (torch.stack([inv_src, inv_dst]),)
        neg = inv_dst[n:].view(r, n).t()
        return inv_src, inv_dst[:n], neg.reshape(n, -1).squeeze(-1)


def local_hop(
    graph_store: GraphStoreCore,
    jobs: Sequence[tuple],
    replace: bool,
    strategy: str = "uniform",
    edge_level: bool = False,
) -> list[HopResult]:
    """Sample every job on this partition (its frontier nodes must be owned here).

    A job is `(edge type, frontier, fan-out, seed[, seed time per frontier entry])`; with
    times, neighbours later than their entry's time are skipped (sources with a time only),
    or with `edge_level`, edges later than it (edge types with a time only).
    """
    with stage("kernel"):
        return _local_hop(graph_store, jobs, replace, strategy, edge_level)


def _local_hop(
    graph_store: GraphStoreCore,
    jobs: Sequence[tuple],
    replace: bool,
    strategy: str,
    edge_level: bool,
) -> list[HopResult]:
    out = []
    for edge_type, frontier, k, seed, *rest in jobs:
        colptr, row, edge_id = graph_store.csc_numpy(edge_type)
        time = rest[0] if rest else None
        if edge_level:
            nbrs, epos, counts = _edge_time_hop(
                graph_store, edge_type, frontier, k, replace, seed, time, strategy
            )
            out.append((nbrs, edge_id[epos].astype(np.int64, copy=False), counts))
            continue
        src_type = edge_type[0] if edge_type is not None else None
        if src_type is not None and src_type not in graph_store.time_types:
            time = None  # a source type without time is not filtered (the local rule)
        node_time = None if time is None else graph_store.node_time_numpy(src_type)
        nbrs, epos, counts = sample_hop(
            colptr, row, frontier, k, replace, seed, node_time, time, strategy
        )
        # compact (int32) partitions: ids leave the partition as int64, the sampler's dtype
        out.append(
            (nbrs.astype(np.int64, copy=False), edge_id[epos].astype(np.int64, copy=False), counts)
        )
    return out


def _edge_time_hop(
    gs: GraphStoreCore,
    edge_type: Any,
    frontier: np.ndarray,
    k: int,
    replace: bool,
    seed: int,
    time: np.ndarray | None,
    strategy: str,
) -> HopResult:
    """One hop filtered by edge time: the kernel's node-time filter run over each column's
    time-ordered edge positions (`time[position]`), so the same kernel draws; it returns the
    positions drawn (its "neighbours"), and the neighbours are the rows at those positions."""
    colptr, row, _ = gs.csc_numpy(edge_type)
    timed = gs.edge_time_numpy(edge_type)
    if timed is None or time is None:
        nbrs, epos, counts = sample_hop(
            colptr, row, frontier, k, replace, seed, None, None, strategy
        )
    else:
        edge_time, positions = timed
        epos, _, counts = sample_hop(
            colptr, positions, frontier, k, replace, seed, edge_time, time, strategy
        )
        nbrs = row[epos]
    return nbrs.astype(np.int64, copy=False), epos, counts


def sampler_for(options: SamplerOptions) -> DistNeighborSampler:
    """This process's sampler for a trainer's `options` over the stores it serves (built once,
    shared by its RPC threads): what the batch endpoints run."""
    key = options.key()
    with _samplers_lock:
        if key not in _samplers:
            _samplers[key] = DistNeighborSampler(
                endpoints.stores(), options=options, router=endpoints.router()
            )
        return _samplers[key]


def hop_stats() -> tuple[int, int]:
    """(remote hop requests, bytes) of this process's samplers so far."""
    stats = [s.stats for s in _samplers.values()]
    return sum(h.requests for h in stats), sum(h.bytes for h in stats)


def times_to_graph_store(fs: FeatureStoreCore, gs: GraphStoreCore, time_attr: str | None) -> None:
    """PyG's times in the feature store → the graph store, where local and peers' hops read
    them: node time (`time`) by global id, edge time per local edge in CSC order."""
    if not time_attr:
        return
    if time_attr == "time":
        for group in [None] if not gs.is_hetero else list(gs.meta.get("node_types", [])):
            if group not in gs.time_types and "time" in fs.attr_names(group):
                gs.put_node_time(fs.attr(group, "time"), group)
        return
    for key in [None] if not gs.is_hetero else gs.edge_types:
        if key not in gs.edge_time_types:
            time = _edge_time(fs, gs, key, time_attr)
            if time is not None:
                gs.put_edge_time(time, key)


def _edge_time(fs: FeatureStoreCore, gs: GraphStoreCore, key: Any, attr: str) -> Tensor | None:
    """Edge time per local edge of `key`, in the graph store's CSC order, or None."""
    edge_id = gs.csc_numpy(key)[2]
    group = key if key is not None else (None, None)
    if attr in fs.attr_names(group):  # rows of edges by global edge id (partitions)
        return fs.local_get(edge_id, group, [attr])[attr]
    if key is None and attr in fs.attr_names(None):  # PyG's from_data: rows as edges were put
        time = fs.attr(None, attr)
        if time.numel() != edge_id.size or int(edge_id.max(initial=-1)) >= time.numel():
            raise ValueError(
                f"edge time {attr!r} has {time.numel()} rows for {edge_id.size} local edges "
                "(put in the graph store's edge order): pass one time per local edge"
            )
        return time[torch.from_numpy(edge_id)]
    return None


def _check_temporal(graph_store: GraphStoreCore, time_attr: str | None, strategy: str) -> bool:
    """Whether sampling is temporal; refuses what the partition cannot serve, early."""
    if strategy not in STRATEGIES:
        raise ValueError(
            f"temporal_strategy={strategy!r}: expected one of {STRATEGIES}; "
            "set sampler.temporal_strategy=uniform or last"
        )
    if not time_attr:
        return False
    if time_attr != "time":
        if graph_store.edge_time_types:
            return True  # edge-level: PyG's rule, any name but `time` is an edge attribute
        raise ValueError(
            f"time_attr={time_attr!r}: partitions store node time as 'time' and this graph "
            "store holds no edge time; set sampler.time_attr=time"
        )
    if not graph_store.is_hetero or not graph_store.time_types:
        graph_store.node_time(None)  # raises the one-line fix when the partition has no times
    return True


def _subjobs(jobs: Sequence[Job], splits: list, p: int) -> list:
    """Jobs restricted to partition p's frontier nodes (jobs without any are left out)."""
    return [
        (et, take(f, splits[i][p]), k, sd, None if t is None else take(t, splits[i][p]))
        for i, (et, f, k, sd, t) in enumerate(jobs)
        if p in splits[i]
    ]


class _HopCall:
    """A remote hop in flight; `wait()` gives numpy results and counts the bytes received."""

    def __init__(self, call: rpc.PendingCall, stats: HopStats, sizes: list[int]) -> None:
        self.call, self.stats, self.sizes = call, stats, sizes

    def wait(self) -> list[HopResult]:
        got = self.call.wait()
        self.stats.add(0, wire.nbytes(got))
        return wire.unpack_reply(got, self.sizes)


def _pos(splits: list, i: int, p: int) -> int:
    """Index of job i among the jobs sent to partition p."""
    return sum(1 for j in range(i) if p in splits[j])


def _cat(chunks: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(chunks) if chunks else np.empty(0, np.int64)


def _pair(rows: list[np.ndarray], cols: list[np.ndarray]) -> np.ndarray:
    """The hops' rows and columns concatenated into the two halves of one `[2, E]` array, which
    `to_data` then takes as `edge_index` without stacking a copy."""
    out = np.empty((2, sum(r.size for r in rows)), np.int64)
    if rows:
        np.concatenate(rows, out=out[0])
        np.concatenate(cols, out=out[1])
    return out


def _thaw(num_neighbors: Any) -> Any:
    if num_neighbors and isinstance(num_neighbors[0], tuple):
        return {et: list(v) for et, v in num_neighbors}
    return list(num_neighbors)


def _freeze(num_neighbors: Any) -> Any:
    """Fan-outs as nested tuples; PyG's "src__rel__dst" keys become edge-type tuples."""
    if isinstance(num_neighbors, dict):
        return tuple(
            (tuple(k.split("__")) if isinstance(k, str) else tuple(k), tuple(v))
            for k, v in num_neighbors.items()
        )
    return tuple(num_neighbors)
