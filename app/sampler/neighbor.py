"""Multi-hop neighbour sampling: a driver over any hop function, and the local `NeighborSampler`.

The driver (`sample_multi_hop`, `sample_multi_hop_hetero`) owns PyG's output layout: seeds first,
then each hop's new nodes in first-appearance order, edges from neighbour (row) to frontier node
(col), per-hop counts. Where the neighbours come from is a hop function

    hop_fn(frontier: int64[n] global ids, k: int, hop: int[, time=seed time per frontier entry])
        -> (nbrs: global ids, edge_ids: global edge ids, counts: int64[n])

(`time=` is passed only in temporal sampling). The local sampler's hop function reads one CSC;
the distributed sampler's asks the owners of the frontier nodes. `NeighborSampler` uses the fused
kernel for homogeneous graphs; its output equals the driver over `local_hop_fn` (same seed).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    HeteroSamplerOutput,
    NegativeSampling,
    NodeSamplerInput,
    SamplerOutput,
)

from app.config import kernels_forced
from app.sampler.buffers import BufferPool
from app.sampler.csc import as_index_array, to_csc
from app.sampler.kernel import (
    STRATEGIES,
    Relabeler,
    Workspace,
    derive_seed,
    hop_seed,
    induced_edges,
    neighbor_sample,
    sample_hop,
    warmup,
)
from app.sampler.stages import stage
from app.sampler.torch_kernel import TorchCSC
from app.sampler.torch_kernel import neighbor_sample as torch_neighbor_sample

EdgeType = tuple[str, str, str]
HopFn = Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]
SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")
_NONE = np.empty(0, np.int64)  # a workspace array between calls (the pool holds the real ones)
_SLACK = 1.1  # a batch's pooled outputs: room for this times the last batch's edges
_KEEP = 8  # output buffers kept per array: batches a loader's threads and its consumer hold


def _fronts(values: np.ndarray, buf: np.ndarray) -> bool:
    """Whether `values` are the front of `buf` (the kernel wrote into it, not a grown copy)."""
    return values.ctypes.data == buf.ctypes.data and values.shape[0] <= buf.shape[0]


def _t(a: np.ndarray) -> Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))


def _own(a: np.ndarray | None) -> Tensor:
    """A copy of a relabeler's view as a tensor: the relabeler is reused by the next sample, so
    a batch kept meanwhile must not share its arrays."""
    assert a is not None  # a relabeler's batch ids, asked for in disjoint sampling only
    return _t(a.copy())


# Fan-outs #########################################################################################


def _check_fanout(values, where: str) -> list[int]:
    out = [int(v) for v in values]
    if any(v < -1 for v in out):
        raise ValueError(f"num_neighbors{where} must hold ints >= -1 (-1 = all); got {out}")
    return out


def normalize_num_neighbors(num_neighbors, edge_types: list[EdgeType]) -> dict[EdgeType, list[int]]:
    """Fan-outs per edge type from a list (same for all) or a dict keyed by tuple / 'a__r__b'."""
    if isinstance(num_neighbors, (list, tuple)):
        fan = _check_fanout(num_neighbors, "")
        return {et: list(fan) for et in edge_types}
    if not isinstance(num_neighbors, dict):
        raise ValueError(f"num_neighbors must be a list or a dict (got {type(num_neighbors)})")
    by_key = {}
    for key, fan in num_neighbors.items():
        et = tuple(key.split("__")) if isinstance(key, str) else tuple(key)
        if et not in edge_types:
            raise ValueError(
                f"num_neighbors names edge type {key!r}, not in the graph's {edge_types}"
            )
        by_key[et] = _check_fanout(fan, f"[{key!r}]")
    missing = [et for et in edge_types if et not in by_key]
    if missing:
        raise ValueError(f"num_neighbors lacks edge types {missing}; give a fan-out list for each")
    if len({len(f) for f in by_key.values()}) > 1:
        lens = {"__".join(et): len(f) for et, f in by_key.items()}
        raise ValueError(f"every edge type needs the same number of hops (got {lens})")
    return {et: by_key[et] for et in edge_types}


# Drivers ##########################################################################################


def _call_hop(hop_fn: HopFn, frontier, k, hop, time, where: str):
    out = hop_fn(frontier, k, hop) if time is None else hop_fn(frontier, k, hop, time=time)
    nbrs, eids, counts = (as_index_array(a, "hop output") for a in out)
    if counts.shape != frontier.shape or int(counts.sum()) != nbrs.shape[0]:
        raise ValueError(
            f"hop_fn{where} at hop {hop} returned {counts.shape[0]} counts summing to "
            f"{int(counts.sum())} for {frontier.shape[0]} frontier nodes and "
            f"{nbrs.shape[0]} neighbours; it must return one count per frontier node"
        )
    return nbrs, eids, counts


def _relabeler(rel: Relabeler | None, num_nodes: int, disjoint: bool) -> Relabeler:
    if rel is None:
        return Relabeler(num_nodes, disjoint)
    if rel.disjoint != disjoint or rel.num_nodes != num_nodes:
        raise ValueError(
            f"relabeler is (num_nodes={rel.num_nodes}, disjoint={rel.disjoint}) but the sample "
            f"needs ({num_nodes}, {disjoint})"
        )
    rel.reset()
    return rel


def sample_multi_hop(
    seeds,
    num_neighbors: list[int],
    hop_fn: HopFn,
    num_nodes: int,
    disjoint: bool = False,
    seed_time=None,
    relabeler: Relabeler | None = None,
) -> SamplerOutput:
    """Homogeneous multi-hop sample through `hop_fn` (see module doc); temporal ⇒ disjoint.

    Pass a `relabeler` (one per thread) to reuse its O(N) map across calls; it is left reset.
    """
    seeds = as_index_array(seeds, "seeds")
    times = None if seed_time is None else np.asarray(seed_time)
    disjoint = disjoint or times is not None
    rel = _relabeler(relabeler, num_nodes, disjoint)
    rel.fill(seeds)
    rows, cols, edges, nse = [], [], [], []
    nsn = [seeds.shape[0]]
    begin, end = 0, seeds.shape[0]
    for hop, k in enumerate(_check_fanout(num_neighbors, "")):
        frontier = rel.nodes[begin:end].copy()
        fb = rel.batch[begin:end].copy() if disjoint else None
        time = None if times is None else times[fb]
        nbrs, eids, counts = _call_hop(hop_fn, frontier, k, hop, time, "")
        row, col = rel.add_hop(nbrs, counts, np.arange(begin, end, dtype=np.int64), fb)
        rows.append(row)
        cols.append(col)
        edges.append(eids)
        nsn.append(len(rel) - end)
        nse.append(nbrs.shape[0])
        begin, end = end, len(rel)
    out = SamplerOutput(
        node=_own(rel.nodes),
        row=_t(np.concatenate(rows) if rows else np.empty(0, np.int64)),
        col=_t(np.concatenate(cols) if cols else np.empty(0, np.int64)),
        edge=_t(np.concatenate(edges) if edges else np.empty(0, np.int64)),
        batch=_own(rel.batch) if disjoint else None,
        num_sampled_nodes=nsn,
        num_sampled_edges=nse,
    )
    rel.reset()
    return out


class _HeteroState:
    """Per-node-type relabelers and hop slices of one hetero sample."""

    def __init__(self, seeds, num_nodes, disjoint, relabelers):
        self.rels = {
            nt: _relabeler((relabelers or {}).get(nt), n, disjoint) for nt, n in num_nodes.items()
        }
        offset = 0
        for nt, s in seeds.items():
            if disjoint:
                self.rels[nt].add(s, np.arange(offset, offset + s.shape[0], dtype=np.int64))
            else:
                self.rels[nt].fill(s)
            offset += s.shape[0]
        self.begin = dict.fromkeys(num_nodes, 0)
        self.end = {nt: len(r) for nt, r in self.rels.items()}
        self.nsn = {nt: [len(r)] for nt, r in self.rels.items()}

    def next_hop(self) -> None:
        for nt, rel in self.rels.items():
            self.nsn[nt].append(len(rel) - self.end[nt])
            self.begin[nt], self.end[nt] = self.end[nt], len(rel)


def sample_multi_hop_hetero(
    seeds: dict[str, np.ndarray],
    num_neighbors: dict[EdgeType, list[int]],
    hop_fns: dict[EdgeType, HopFn],
    num_nodes: dict[str, int],
    disjoint: bool = False,
    seed_time: dict[str, np.ndarray] | None = None,
    relabelers: dict[str, Relabeler] | None = None,
) -> HeteroSamplerOutput:
    """Hetero multi-hop sample: per hop, each edge type (src, rel, dst) samples in-neighbours of
    the dst nodes added in the previous hop. Batch ids count seeds across types in dict order."""
    seeds = {nt: as_index_array(s, f"seeds[{nt!r}]") for nt, s in seeds.items()}
    unknown = [nt for nt in seeds if nt not in num_nodes]
    if unknown:
        raise ValueError(f"seed node types {unknown} are not in the graph's {list(num_nodes)}")
    fan = normalize_num_neighbors(num_neighbors, list(hop_fns))
    times = None
    if seed_time is not None:
        times = np.concatenate([np.asarray(seed_time[nt]) for nt in seeds])
    disjoint = disjoint or times is not None
    st = _HeteroState(seeds, num_nodes, disjoint, relabelers)
    parts = {et: ([], [], []) for et in hop_fns}
    nse = {et: [] for et in hop_fns}
    num_hops = len(next(iter(fan.values()))) if fan else 0
    for hop in range(num_hops):
        for et, hop_fn in hop_fns.items():
            n = _sample_edge_type(st, et, hop_fn, fan[et][hop], hop, times, disjoint, parts[et])
            nse[et].append(n)
        st.next_hop()
    return _hetero_output(st, parts, nse, disjoint)


def _sample_edge_type(st: _HeteroState, et, hop_fn, k, hop, times, disjoint, parts) -> int:
    src, _, dst = et
    b, e = st.begin[dst], st.end[dst]
    if e == b or k == 0:
        return 0
    frontier = st.rels[dst].nodes[b:e].copy()
    fb = st.rels[dst].batch[b:e].copy() if disjoint else None
    time = None if times is None else times[fb]
    nbrs, eids, counts = _call_hop(hop_fn, frontier, k, hop, time, f"[{et}]")
    row, col = st.rels[src].add_hop(nbrs, counts, np.arange(b, e, dtype=np.int64), fb)
    parts[0].append(row)
    parts[1].append(col)
    parts[2].append(eids)
    return nbrs.shape[0]


def _cat(chunks: list[np.ndarray]) -> Tensor:
    return _t(np.concatenate(chunks) if chunks else np.empty(0, np.int64))


def _hetero_output(st: _HeteroState, parts, nse, disjoint) -> HeteroSamplerOutput:
    out = HeteroSamplerOutput(
        node={nt: _own(r.nodes) for nt, r in st.rels.items()},
        row={et: _cat(p[0]) for et, p in parts.items()},
        col={et: _cat(p[1]) for et, p in parts.items()},
        edge={et: _cat(p[2]) for et, p in parts.items()},
        batch={nt: _own(r.batch) for nt, r in st.rels.items()} if disjoint else None,
        num_sampled_nodes=st.nsn,
        num_sampled_edges=nse,
    )
    for rel in st.rels.values():
        rel.reset()
    return out


def local_hop_fn(
    colptr: np.ndarray,
    row: np.ndarray,
    perm: np.ndarray,
    replace: bool = False,
    seed: int = 0,
    node_time=None,
    strategy: str = "uniform",
    etype_index: int | None = None,
) -> HopFn:
    """A hop function over one CSC (edge ids through `perm`). Hop h draws with
    `hop_seed(seed, h)`, or `derive_seed(hop_seed(seed, h), etype_index)` for edge type number
    `etype_index` of a hetero graph, the scheme the distributed sampler uses too."""

    def hop_fn(frontier, k, hop, time=None):
        hs = hop_seed(seed, hop)
        hs = hs if etype_index is None else derive_seed(hs, etype_index)
        nt = node_time if time is not None else None
        with stage("kernel"):
            nbrs, epos, counts = sample_hop(
                colptr,
                row,
                frontier,
                k,
                replace=replace,
                seed=hs,
                node_time=nt,
                seed_time=time,
                strategy=strategy,
            )
            return nbrs, perm[epos], counts

    return hop_fn


# The local sampler ################################################################################


def _node_time(data, time_attr: str | None):
    """Node-level time as numpy (dict per node type for HeteroData); edge-level time is refused."""
    if time_attr is None:
        return None
    if isinstance(data, Data):
        ok = time_attr in data and data.is_node_attr(time_attr)
    else:
        on_edges = any(time_attr in s for s in data.edge_stores)
        ok = not on_edges and any(time_attr in s for s in data.node_stores)
    if not ok:
        raise ValueError(
            f"time_attr {time_attr!r} must be a node-level attribute (edge-level time is not "
            "supported); store one timestamp per node"
        )
    if isinstance(data, Data):
        return data[time_attr].numpy()
    return {s._key: s[time_attr].numpy() for s in data.node_stores if time_attr in s}


class NeighborSampler(BaseSampler):
    """In-memory neighbour sampler over `Data` / `HeteroData` with PyG's semantics and layout.

    Every call draws with its own seed: `seed=` when given (loaders pass one per batch, so an
    epoch is reproducible), else `derive_seed(self.seed, call number)`.

    `device` is where the CSC lives and sampling runs (one entry, a kernel per device, as
    `app.model.ops`): in host memory the numba kernel, on a GPU the torch twin
    (`torch_kernel`), whose outputs stay on that device. `DISTGNN_KERNELS=torch` sends a CPU
    sampler to the torch twin too, where it applies (homogeneous, not disjoint, not temporal,
    not induced; other samples keep the numba kernel, and a GPU sampler refuses them).
    """

    def __init__(
        self,
        data: Data | HeteroData,
        num_neighbors,
        replace: bool = False,
        subgraph_type: str = "directional",
        disjoint: bool = False,
        time_attr: str | None = None,
        temporal_strategy: str = "uniform",
        seed: int = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        _check_options(subgraph_type, temporal_strategy, disjoint, time_attr)
        self.replace, self.subgraph_type = bool(replace), subgraph_type
        self.temporal_strategy, self.seed = temporal_strategy, int(seed)
        self.node_time = _node_time(data, time_attr)
        self.disjoint = bool(disjoint) or self.node_time is not None
        self.is_hetero = isinstance(data, HeteroData)
        if self.is_hetero:
            self._init_hetero(data, num_neighbors)
        elif isinstance(data, Data):
            self._init_homo(data, num_neighbors)
        else:
            raise ValueError(f"data must be Data or HeteroData (got {type(data).__name__})")
        self.tensors = self._on_device(torch.device(device))
        self._calls = itertools.count()
        self._local = threading.local()
        self.pool = BufferPool(keep=_KEEP)  # the homogeneous kernel's outputs
        self._edges_hint = 0  # the last batch's edge count: sizes the next one's buffers
        warmup()

    def _on_device(self, device: torch.device) -> TorchCSC | None:
        """The CSC as tensors on `device` when the torch twin samples (see the class doc)."""
        torch_ok = not (self.is_hetero or self.disjoint or self.subgraph_type == "induced")
        if device.type == "cpu" and (kernels_forced() != "torch" or not torch_ok):
            return None
        if not torch_ok:
            kind = "HeteroData" if self.is_hetero else "disjoint/temporal/induced sampling"
            raise ValueError(
                f"sampling on {device} handles homogeneous, non-disjoint, non-temporal, "
                f"non-induced samples; {kind} needs sampler.device=cpu"
            )
        return TorchCSC.from_numpy(self.colptr, self.row, self.perm, device)

    def _init_homo(self, data: Data, num_neighbors) -> None:
        if not isinstance(num_neighbors, (list, tuple)):
            raise ValueError(f"num_neighbors must be a list for Data (got {num_neighbors!r})")
        self.num_neighbors = _check_fanout(num_neighbors, "")
        self.num_nodes = int(data.num_nodes)
        ei = data.edge_index if data.edge_index is not None else torch.empty(2, 0)
        self.colptr, self.row, self.perm = to_csc(ei.long(), self.num_nodes)

    def _init_hetero(self, data: HeteroData, num_neighbors) -> None:
        self.node_types, self.edge_types = data.metadata()
        self.num_nodes = {nt: int(data[nt].num_nodes or 0) for nt in self.node_types}
        self.num_neighbors = normalize_num_neighbors(num_neighbors, self.edge_types)
        self.csc = {
            et: to_csc(data[et].edge_index.long(), self.num_nodes[et[2]]) for et in self.edge_types
        }

    # helpers -----------------------------------------------------------------------------------

    def _next_seed(self, seed: int | None) -> int:
        return derive_seed(self.seed, next(self._calls)) if seed is None else int(seed)

    def _scratch(self, ntype: str | None = None) -> np.ndarray:
        """A per-thread int64[N] map of -1 per node type (the kernels leave it as they found it)."""
        maps = getattr(self._local, "maps", None)
        if maps is None:
            maps = self._local.maps = {}
        if ntype not in maps:
            n = self.num_nodes if ntype is None else self.num_nodes[ntype]
            maps[ntype] = np.full(n, -1, np.int64)
        return maps[ntype]

    def _workspace(self) -> Workspace:
        """This thread's arrays for the fused kernel (kept across calls)."""
        ws = getattr(self._local, "workspace", None)
        if ws is None:
            ws = self._local.workspace = Workspace()
        return ws

    def _relabelers(self) -> dict[str, Relabeler]:
        """Per-thread relabelers per node type, kept across calls (their maps are O(N))."""
        rels = getattr(self._local, "relabelers", None)
        if rels is None:
            rels = self._local.relabelers = {
                nt: Relabeler(n, self.disjoint) for nt, n in self.num_nodes.items()
            }
        return rels

    def hop_fns(self, seed: int) -> dict[EdgeType, HopFn]:
        """Local hop functions per edge type (hetero) for a sample seeded with `seed`."""
        times = self.node_time or {}
        return {
            et: local_hop_fn(
                *self.csc[et], self.replace, seed, times.get(et[0]), self.temporal_strategy, i
            )
            for i, et in enumerate(self.edge_types)
        }

    # sampling ----------------------------------------------------------------------------------

    def sample(self, seeds, seed_time=None, seed: int | None = None):
        """Sample around `seeds` (an index tensor, or a dict per node type for hetero)."""
        seed = self._next_seed(seed)
        if self.node_time is not None and seed_time is None:
            raise ValueError("temporal sampling (time_attr set) needs a seed time per seed")
        if self.is_hetero:
            if not isinstance(seeds, dict):
                raise ValueError("a HeteroData sampler needs seeds as {node_type: ids}")
            seeds = {nt: as_index_array(s, "seeds") for nt, s in seeds.items()}
            with stage("relabel"):  # the hop functions' kernel calls count as "kernel"
                out = self._sample_hetero(seeds, seed_time, seed)
        else:
            out = self._sample_homo(seeds, seed_time, seed)
        return self._finish(out)

    def _sample_hetero(self, seeds, seed_time, seed: int) -> HeteroSamplerOutput:
        return sample_multi_hop_hetero(
            seeds,
            self.num_neighbors,
            self.hop_fns(seed),
            self.num_nodes,
            self.disjoint,
            None if seed_time is None else {k: np.asarray(v) for k, v in seed_time.items()},
            self._relabelers(),
        )

    def _sample_homo(self, seeds, seed_time, seed: int) -> SamplerOutput:
        if self.tensors is not None:
            with stage("kernel"):
                return self._sample_torch(self.tensors, seeds, seed)
        with stage("kernel"):
            ws, bufs = self._pooled_workspace(len(seeds))
            node, rl, cl, eids, nsn, nse, batch = neighbor_sample(
                self.colptr,
                self.row,
                seeds,
                self.num_neighbors,
                replace=self.replace,
                seed=seed,
                disjoint=self.disjoint,
                node_time=self.node_time,
                seed_time=seed_time,
                temporal_strategy=self.temporal_strategy,
                scratch=None if self.disjoint else self._scratch(),
                perm=self.perm,
                workspace=ws,
            )
            ws.nodes = ws.rows = ws.epos = _NONE  # the pool's buffers are the batch's now
        with stage("assembly"):
            node, edge_index, edge = self._outputs(node, rl, cl, eids, bufs)
            return SamplerOutput(
                node=node,
                row=edge_index[0],
                col=edge_index[1],
                edge=edge,
                batch=None if batch is None else _t(batch),
                num_sampled_nodes=nsn,
                num_sampled_edges=nse,
            )

    def _pooled_workspace(self, num_seeds: int) -> tuple[Workspace, tuple[np.ndarray, ...]]:
        """This thread's workspace with its node, row and edge-id arrays set to free buffers of
        `self.pool` (paged in already), sized from the last batch, so the kernel writes those
        outputs where the batch keeps them (the buffers are returned: node, `edge_index`, edge;
        `row` is the front of `edge_index`'s). Columns stay in the thread's own array: they go behind the rows once the edge
        count is known (the kernel learns it only at the end)."""
        ws = self._workspace()
        edge_buf = self.pool.whole("edge_index", 2 * int(self._edges_hint * _SLACK), np.int64)
        half = edge_buf.shape[0] // 2
        ws.rows = edge_buf[:half]
        ws.nodes = self.pool.whole("node", half + num_seeds, np.int64)  # nodes <= seeds + edges
        ws.epos = self.pool.whole("edge", half, np.int64)
        return ws, (ws.nodes, edge_buf, ws.epos)

    def _outputs(
        self, node: np.ndarray, row: np.ndarray, col: np.ndarray, edge: np.ndarray, bufs: tuple
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The kernel's outputs as tensors over pooled buffers: node ids, `[row; col]` as one
        `[2, E]` buffer (so `to_data` takes `edge_index` as a view) and edge ids. Where the
        kernel wrote into its buffer from `_pooled_workspace` (`bufs`), that buffer is the
        output; where the batch outgrew it (the kernel grew a fresh array), it is copied into
        one."""
        node_buf, edge_buf, eid_buf = bufs
        e = row.shape[0]
        self._edges_hint = e
        if _fronts(row, edge_buf):
            edge_index = torch.from_numpy(edge_buf[: 2 * e]).view(2, e)
        else:
            edge_index = self.pool.rows("edge_index", 2 * e, (), torch.int64).view(2, e)
            np.copyto(edge_index[0].numpy(), row)
        np.copyto(edge_index[1].numpy(), col)
        return self._pooled("node", node, node_buf), edge_index, self._pooled("edge", edge, eid_buf)

    def _pooled(self, name: str, values: np.ndarray, buf: np.ndarray) -> Tensor:
        """`values` as a tensor: a view when they are the front of `buf` (the kernel wrote them
        there), else copied into a pool buffer."""
        if _fronts(values, buf):
            return torch.from_numpy(values)
        out = self.pool.rows(name, values.shape[0], (), torch.int64)
        np.copyto(out.numpy(), values)
        return out

    def _sample_torch(self, csc: TorchCSC, seeds, seed: int) -> SamplerOutput:
        scratch = getattr(self._local, "tensor_map", None)
        if scratch is None:
            scratch = self._local.tensor_map = csc.scratch()
        seeds = torch.as_tensor(seeds)
        node, rl, cl, eids, nsn, nse = torch_neighbor_sample(
            csc, seeds, self.num_neighbors, seed, scratch
        )
        return SamplerOutput(node, rl, cl, eids, num_sampled_nodes=nsn, num_sampled_edges=nse)

    def _finish(self, out):
        if self.subgraph_type == "bidirectional":
            return out.to_bidirectional()
        if self.subgraph_type == "induced":
            return self._induce(out)
        return out

    def _induce(self, out):
        """Replace the sampled edges by every graph edge among the sampled nodes."""
        with stage("kernel"):
            return self._induce_edges(out)

    def _induce_edges(self, out):
        if not self.is_hetero:
            node = out.node.numpy()
            rl, cl, epos = induced_edges(self.colptr, self.row, node, node, self._scratch())
            out.row, out.col, out.edge = _t(rl), _t(cl), _t(self.perm[epos])
            out.num_sampled_edges = None
            return out
        for et in self.edge_types:
            colptr, row, perm = self.csc[et]
            src, dst = out.node[et[0]].numpy(), out.node[et[2]].numpy()
            rl, cl, epos = induced_edges(colptr, row, dst, src, self._scratch(et[0]))
            out.row[et], out.col[et], out.edge[et] = _t(rl), _t(cl), _t(perm[epos])
        out.num_sampled_edges = None
        return out

    def sample_from_nodes(
        self, inputs: NodeSamplerInput, seed: int | None = None
    ) -> SamplerOutput | HeteroSamplerOutput:
        if self.is_hetero and inputs.input_type is None:
            raise ValueError("sampling a HeteroData needs NodeSamplerInput.input_type (node type)")
        if self.is_hetero:
            seeds = {inputs.input_type: inputs.node}
            times = None if inputs.time is None else {inputs.input_type: inputs.time}
        else:
            seeds, times = inputs.node, inputs.time
        out = self.sample(seeds, times, seed)
        out.metadata = (inputs.input_id, inputs.time)
        return out

    def sample_from_edges(
        self,
        inputs: EdgeSamplerInput,
        neg_sampling: NegativeSampling | None = None,
        seed: int | None = None,
    ) -> SamplerOutput | HeteroSamplerOutput:
        """Sample around both ends of each seed link (plus negatives), PyG's link layout."""
        return _edge_sample(self, inputs, NegativeSampling.cast(neg_sampling), seed)

    @property
    def edge_permutation(self):
        return None  # `edge` already holds original edge ids


def _check_options(subgraph_type, temporal_strategy, disjoint, time_attr) -> None:
    if subgraph_type not in SUBGRAPH_TYPES:
        raise ValueError(f"subgraph_type must be one of {SUBGRAPH_TYPES} (got {subgraph_type!r})")
    if temporal_strategy not in STRATEGIES:
        raise ValueError(
            f"temporal_strategy must be one of {STRATEGIES} (got {temporal_strategy!r})"
        )
    if subgraph_type == "induced" and (disjoint or time_attr is not None):
        raise ValueError(
            "subgraph_type='induced' cannot be disjoint/temporal (PyG's rule); "
            "use 'directional' or 'bidirectional'"
        )


# Link sampling ####################################################################################


def _negatives(num: int, num_nodes: int, weight, seed: int) -> Tensor:
    """`num` random node ids (uniform, or ∝ `weight`), reproducible from `seed`."""
    if weight is None:
        rng = np.random.default_rng(seed)
        return torch.from_numpy(rng.integers(0, num_nodes, num, dtype=np.int64))
    if weight.numel() != num_nodes:
        raise ValueError(f"negative-sampling weight has {weight.numel()} entries, need {num_nodes}")
    gen = torch.Generator().manual_seed(seed & ((1 << 63) - 1))
    return torch.multinomial(weight.float(), num, replacement=True, generator=gen)


def _temporal_negatives(num, num_nodes, weight, seed, node_time, seed_time) -> Tensor:
    """Negatives no later than their seed's time: greedy redraws, then the earliest node."""
    out = _negatives(num, num_nodes, weight, seed)
    node_time = torch.as_tensor(node_time)
    for attempt in range(5):
        bad = node_time[out] > seed_time
        if not bool(bad.any()):
            return out
        out[bad] = _negatives(int(bad.sum()), num_nodes, weight, derive_seed(seed, attempt))
    bad = node_time[out] > seed_time
    out[bad] = int(node_time.argmin())
    return out


def _neg_for(sampler, ns, num, endpoint, ntype, seed, times) -> Tensor:
    n = sampler.num_nodes[ntype] if ntype is not None else sampler.num_nodes
    weight = ns.src_weight if endpoint == "src" else ns.dst_weight
    nt = sampler.node_time
    if isinstance(nt, dict):
        nt = nt.get(ntype)
    if nt is None or times is None:
        return _negatives(num, n, weight, seed)
    return _temporal_negatives(num, n, weight, seed, nt, times)


def _edge_sample(sampler: NeighborSampler, inputs: EdgeSamplerInput, ns, seed: int | None):
    seed = sampler._next_seed(seed)
    et = inputs.input_type
    src_t, dst_t = (None, None) if et is None else (et[0], et[-1])
    src, dst, label, time = inputs.row, inputs.col, inputs.label, inputs.time
    num_pos = src.numel()
    src_time = dst_time = time
    if ns is not None and ns.is_binary():
        num_neg = math.ceil(num_pos * ns.amount)
        rep = None if time is None else time.repeat(1 + math.ceil(ns.amount))[: num_pos + num_neg]
        neg_time = None if rep is None else rep[num_pos:]
        src = torch.cat([src, _neg_for(sampler, ns, num_neg, "src", src_t, seed, neg_time)])
        dst = torch.cat([dst, _neg_for(sampler, ns, num_neg, "dst", dst_t, seed + 1, neg_time)])
        label = torch.ones(num_pos) if label is None else label
        label = torch.cat([label, label.new_zeros((num_neg,) + label.size()[1:])])
        src_time = dst_time = rep
    elif ns is not None:
        if label is not None:
            raise ValueError("triplet negative sampling takes no edge_label; drop edge_label")
        num_neg = num_pos * int(ns.amount)
        rep = None if time is None else time.repeat(1 + int(ns.amount))
        neg_time = None if rep is None else rep[num_pos:]
        dst = torch.cat([dst, _neg_for(sampler, ns, num_neg, "dst", dst_t, seed + 1, neg_time)])
        dst_time = rep
    link = (src, dst, src_time, dst_time, label, num_pos)
    if et is None or src_t == dst_t:
        out, idx = _sample_link_merged(sampler, link, src_t, seed)
    else:
        out, idx = _sample_link_split(sampler, link, src_t, dst_t, seed)
    if sampler.disjoint:
        out.batch = (
            {k: b % num_pos for k, b in out.batch.items()}
            if et is not None
            else out.batch % num_pos
        )
    if ns is None or ns.is_binary():
        out.metadata = (inputs.input_id, idx, label, src_time)
    else:
        src_index, dst_pos, dst_neg = idx
        out.metadata = (inputs.input_id, src_index, dst_pos, dst_neg, src_time)
    return out


def _sample_link_merged(sampler, link, ntype, seed):
    """Both ends share one node type: sample around cat([src, dst])."""
    src, dst, src_time, dst_time, _, num_pos = link
    seeds = torch.cat([src, dst])
    times = None if src_time is None else torch.cat([src_time, dst_time])
    if sampler.disjoint:
        local = torch.arange(seeds.numel())
    else:
        seeds, local = seeds.unique(return_inverse=True)
    if ntype is None:
        out = sampler.sample(seeds, times, seed)
    else:
        out = sampler.sample({ntype: seeds}, None if times is None else {ntype: times}, seed)
    n_src = src.numel()
    if n_src == dst.numel():
        return out, local.view(2, -1)
    return out, _triplet_index(local[:n_src], local[n_src:], num_pos)


def _sample_link_split(sampler, link, src_t, dst_t, seed):
    """Ends of different node types: seeds per type."""
    src, dst, src_time, dst_time, _, num_pos = link
    if sampler.disjoint:
        inv_src, inv_dst = torch.arange(src.numel()), torch.arange(dst.numel())
    else:
        src, inv_src = src.unique(return_inverse=True)
        dst, inv_dst = dst.unique(return_inverse=True)
    times = None if src_time is None else {src_t: src_time, dst_t: dst_time}
    out = sampler.sample({src_t: src, dst_t: dst}, times, seed)
    if inv_src.numel() == inv_dst.numel():
        return out, torch.stack([inv_src, inv_dst])
    return out, _triplet_index(inv_src, inv_dst, num_pos)


def _triplet_index(src_local: Tensor, dst_local: Tensor, num_pos: int):
    """(src_index, dst_pos_index, dst_neg_index[num_pos, amount] squeezed) as PyG lays them."""
    dst_neg = dst_local[num_pos:].view(-1, num_pos).t().reshape(num_pos, -1).squeeze(-1)
    return src_local, dst_local[:num_pos], dst_neg
