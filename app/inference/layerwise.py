"""Exact layer-wise full-neighbourhood inference over a `GraphView` (local or distributed).

For l = 1..L, every rank computes layer l for the nodes it owns (`view.mine`), chunk by chunk
(`chunk_size` targets at a time, so the per-chunk work memory is bounded whatever the graph
size), from layer l-1 rows of each chunk's in-neighbours. Those rows — the rank's own, read
where they lie, and its halo — are read ONCE per layer and node type (one batched call per
owning partition, in bounded pieces), and the layer's output is written to a new table that the
next layer reads.

A layer that reads projections of `h` instead (a SAGE layer that narrows: `h W_root^T`,
`h W_neigh^T`: fewer columns to move and to aggregate) never sees `h` whole: the layer before
projects each chunk as it computes it (`_Projections`), publishes the neighbour side as the
table the halo is fetched from, and keeps the root side as the buffer the narrowing layer adds
its aggregate to. (At layer 0 the inputs are projected, published, and read after a barrier.)

A barrier closes every layer, so nobody reads rows before they are written; every rank runs
the same barriers and one all-reduce whatever its share, so uneven partitions cannot hang.
Every edge is touched once per layer: O(L·|E|) work instead of sampled evaluation's
O(#seeds · fan-out^L), and the result equals the full-graph forward (no sampling).

The arithmetic runs where the model's weights are (`train.device`). One process (a view that
holds every row, `LocalBackend`) keeps its layer tables where it computes when they fit there
(`_place`): on a GPU nothing but the inputs and the edges (once per view, unless already
there) crosses to the device, and the last layer's argmax comes back. Distributed views keep
the tables in host memory, where other ranks read them, and compute chunks on the device:
each layer's rows are copied there once, the chunks' edge columns (mapped to row positions)
are kept there for the view's later passes, and each chunk's result is copied back into its
table (kept buffers are pinned, so those copies run at full speed). Per-chunk work memory on
the device is bounded by `chunk_size`; the resident part is one layer's rows and the edges.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from app.inference.view import EDGE, EdgeType, GraphView
from app.model.gnn import Block, SplitRows, range_start, whole
from app.model.layerwise import HeteroLayerwiseModel, LayerwiseModel, LayerwiseWrapper
from app.model.ops import LINE_FLOATS, mark_ids, row_argmax

log = logging.getLogger(__name__)


LayerwiseNet = LayerwiseModel | HeteroLayerwiseModel


def _bare(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model


def layerwise_net(model: nn.Module) -> tuple[LayerwiseNet | None, dict[str, Any]]:
    """(the network that runs layer by layer, or None when `model` has none; {node type:
    embedding rows} of featureless types): the one check of `app.model.layerwise`'s protocols."""
    bare = _bare(model)
    net, rows = bare.layerwise_parts() if isinstance(bare, LayerwiseWrapper) else (bare, {})
    if isinstance(net, (LayerwiseModel, HeteroLayerwiseModel)):
        return net, rows
    return None, rows


def supports_layerwise(model: nn.Module) -> bool:
    """Whether `model` has the per-layer API; if not, warns once (one line, naming it)."""
    if layerwise_net(model)[0] is not None:
        return True
    log.warning(
        "%s has no per-layer forward (inference_layer): evaluating with sampled neighbourhoods "
        "(train.eval_mode=sampled)",
        type(_bare(model)).__name__,
    )
    return False


class _Homogeneous:
    """The typed calls of the algorithm on a homogeneous model (one node and edge type)."""

    def __init__(self, net: LayerwiseModel) -> None:
        self.net = net

    def edge_types(self, layer: int, types: set[str]) -> list[EdgeType]:
        return [EDGE]

    def projection(self, layer: int) -> tuple[Tensor, Tensor] | None:
        """The net's `inference_projection(layer)`: `(W_root, W_neigh)` when the layer reads
        `h`'s projections instead of `h`. The last layer's get zero rows up to whole cache
        lines (`_padded`): its output is final, so nothing reads the extra columns."""
        weights = self.net.inference_projection(layer)
        last = layer == self.net.num_inference_layers - 1
        return _padded(weights) if weights is not None and last else weights

    def prepare(self, rows: dict[str, Any]) -> dict[str, Any]:
        return rows

    def layer(
        self,
        layer: int,
        h_own: Tensor,
        lead: Tensor,
        inputs: dict[EdgeType, tuple[Tensor, Block]],
        out: Tensor | None,
    ) -> Tensor:
        h_src, block = inputs[EDGE]  # the block's `dst` marks the targets among the sources
        return self.net.inference_layer(layer, h_src, block, out)


def _padded(weights: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """`weights` with zero rows appended up to a multiple of `LINE_FLOATS` outputs, so each
    projected row fills whole cache lines. Products' 47 classes -> 48: the two projection GEMMs
    take 13 ms instead of 20 per 65,536-row chunk (MKL is slow on odd widths), and the mean over
    a row's in-neighbours reads 3 lines per source row instead of 3.9 on average."""
    pad = -weights[0].size(0) % LINE_FLOATS
    if not pad:
        return weights
    w_root, w_neigh = (torch.cat([w, w.new_zeros(pad, w.size(1))]) for w in weights)
    return w_root, w_neigh


class _Heterogeneous:
    def __init__(self, net: HeteroLayerwiseModel) -> None:
        self.net = net

    def edge_types(self, layer: int, types: set[str]) -> list[EdgeType]:
        return self.net.inference_edge_types(layer, types)

    def projection(self, layer: int) -> tuple[Tensor, Tensor] | None:
        return None

    def prepare(self, rows: dict[str, Any]) -> dict[str, Any]:
        return {t: whole(h) for t, h in rows.items()}  # hetero layers index one tensor

    def layer(
        self,
        layer: int,
        h_own: Tensor,
        lead: Tensor,
        inputs: dict[EdgeType, tuple[Tensor, Block]],
        out: Tensor | None,
    ) -> Tensor:
        own = h_own.index_select(0, lead)  # as `Block.targets`: a faster gather than h[lead]
        return self.net.inference_layer(layer, own, inputs)  # returns fresh rows


@dataclass
class _ReadPlan:
    """Where a rank's layer-wise reads land, computed once per view (every layer reuses it).

    Per node type, a layer's rows are one buffer: first the `local` rows this process holds
    (its tables' shard, in shard order: read in place, never copied after layer 0), then the
    rows of `fetch` (the other ids it reads: its halo, grouped by owner so each owner's answer
    is one block copy). `mine_pos`: its own nodes as positions in the buffer; `pos_of`: every
    global id's position (-1: not read), which maps a chunk's edge sources to its block's
    column indices (per chunk: a map of every edge would be 4 bytes an edge, all evaluation);
    None where this process holds every row of the type in id order (one process: a position
    is the id, and edges are read as they are).
    """

    local: dict[str, int]
    fetch: dict[str, Tensor]
    mine_pos: dict[str, Tensor]
    pos_of: dict[str, Tensor | None]


def _plan(view: GraphView) -> _ReadPlan:
    """The view's `_ReadPlan`: O(nodes + edges), one id -> position map per node type (none
    where this process holds every row: nothing to mark, nothing to fetch)."""
    if "plan" not in view.cache:
        local: dict[str, int] = {}
        fetch: dict[str, Tensor] = {}
        mine_pos: dict[str, Tensor] = {}
        pos_of: dict[str, Tensor | None] = {}
        for t, mine in view.mine.items():
            n = view.num_nodes[t]
            held = view.backend.local_ids(t, n)
            if view.backend.holds_all:
                _check_sources(view, t, n)
                local[t], fetch[t], pos_of[t] = n, held[:0], None
                mine_pos[t] = mine.long()
                continue
            mark = torch.zeros(n, dtype=torch.bool)
            mark[mine] = True
            for et, (_, col) in view.edges.items():
                if et[0] == t:
                    mark_ids(col, mark)
            mark[held] = False
            wanted = mark.nonzero().view(-1)
            order = torch.argsort(view.backend.owners(t, wanted), stable=True)
            local[t], fetch[t] = held.numel(), wanted[order]
            rows = held.numel() + wanted.numel()
            kind = torch.int32 if rows < 2**31 else torch.long  # 4 bytes a node
            pos = torch.full((n,), -1, dtype=kind)
            pos[held] = torch.arange(held.numel(), dtype=kind)
            pos[fetch[t]] = torch.arange(held.numel(), rows, dtype=kind)
            pos_of[t], mine_pos[t] = pos, pos.index_select(0, mine).long()
        view.cache["plan"] = _ReadPlan(local, fetch, mine_pos, pos_of)
    return view.cache["plan"]


def _check_sources(view: GraphView, ntype: str, n: int) -> None:
    """Every edge source of type `ntype` is a row id in [0, n) (read unmapped: an id out of
    range would be read past the rows), else an error naming it."""
    for et, (_, col) in view.edges.items():
        if et[0] == ntype and col.numel():
            low, high = (int(v) for v in torch.aminmax(col))
            if low < 0 or high >= n:
                bad = low if low < 0 else high
                raise IndexError(f"{et}: node id {bad} out of range [0, {n})")


def _shard(table: Any) -> Tensor:
    """The rows of `table` this process holds: a plain tensor's all, a DistTensor's shard."""
    if isinstance(table, Tensor):
        return table
    return table.local if table.local is not None else torch.empty(0, table.shape[1])


class _Buffers:
    """Where a layer-wise pass gets its float buffers (`empty`), and what happens to them when
    the pass ends (`release`: `NodeRows.close`).

    `keep=True` (`train.eval_keep_buffers`; one instance lives in the view's cache): released
    buffers are kept and the next pass takes them back by shape, so from the second evaluation
    on a pass touches no fresh memory. Memory a process touches for the first time costs the
    kernel more than the pass's own work on it here (zeroing and mapping huge pages, ~2 us per
    KB on this VM's two busy cores: products' ~0.8 GB a trainer, ~1.7 s). The price: training
    holds them too, and a pass holds each buffer it took until it ends (two-layer models:
    what they hold at their peak anyway). `keep=False`: plain allocations, freed with their
    last reference.

    `device`: where the buffers live (`_place`): where the pass computes when the view's tables
    are this process's alone, else host memory; `pin`: kept host buffers page-locked (a GPU
    pass copies chunks to and from them)."""

    def __init__(self, keep: bool, pin: bool = False, device: torch.device | None = None) -> None:
        self.keep, self.pin = keep, pin
        self.device = torch.device("cpu") if device is None else device
        self.free: dict[tuple[Any, ...], list[Tensor]] = {}
        self.lent: list[Tensor] = []

    def empty(self, *shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
        """An uninitialised tensor of `shape`."""
        if not self.keep:
            return torch.empty(shape, dtype=dtype, device=self.device)
        kept = self.free.get((*shape, dtype))
        if kept:
            buf = kept.pop()
        else:
            buf = torch.empty(shape, dtype=dtype, device=self.device, pin_memory=self.pin)
        self.lent.append(buf)
        return buf

    def release(self) -> None:
        """The pass is over: what it took can be taken again (kept buffers only)."""
        for buf in self.lent:
            self.free.setdefault((*buf.shape, buf.dtype), []).append(buf)
        self.lent = []


@dataclass
class _Table:
    """A layer's output table, whose shard is the head of `buf` (rows held here are written in
    place); `buf`'s tail receives the rows the next layer fetches."""

    table: Any
    buf: Tensor
    held: int

    def dest(self, lead: Tensor) -> Tensor | None:
        """Where a chunk whose targets sit at rows `lead` can be written in place, if anywhere."""
        first = range_start(lead) if self.held else None
        return None if first is None else self.buf[first : first + lead.numel()]

    def put(self, ids: Tensor, lead: Tensor, result: Tensor, dest: Tensor | None) -> None:
        """Store the rows `result` of the nodes `ids` (at rows `lead`)."""
        if dest is not None:  # the targets' rows, a block of this process's shard
            if result is not dest:  # else written in place already
                dest.copy_(result)
        elif self.held:  # in this process's shard, but not one block (or computed elsewhere)
            _store(self.buf, lead, range_start(lead), result)
        else:
            self.table[ids] = result.cpu()


@dataclass
class _Projections:
    """A layer's output kept only as the next layer reads it, `(h W_root^T, h W_neigh^T)` (a
    SAGE layer that narrows): each chunk's `h` lives in `scratch` until both are taken, so `h`
    is never stored (nor its pages touched) whole. `root`: at the targets' positions;
    `neigh`: this process's rows (published as `table`); the halo's are fetched by `read`. A
    node's other trainers, holding no rows, write their targets' neighbour rows to the owner's
    table."""

    weights: tuple[Tensor, Tensor]
    root: Tensor
    neigh: Tensor
    table: Any
    held: int
    scratch: Tensor

    def dest(self, lead: Tensor) -> Tensor:
        return self.scratch[: lead.numel()]

    def put(self, ids: Tensor, lead: Tensor, h: Tensor, dest: Tensor | None) -> None:
        w_root, w_neigh = self.weights
        first = range_start(lead)
        _project(h, w_root, self.root, lead, first)
        if self.held:
            _project(h, w_neigh, self.neigh, lead, first)
        else:
            self.table[ids] = (h @ w_neigh.t()).cpu()

    def read(
        self, fetch: Tensor, spare: Tensor | None, buffers: _Buffers
    ) -> tuple[Tensor, Tensor | SplitRows]:
        """The next layer's rows, once every rank has published its own (after the barrier):
        the halo's go to `spare` (memory the last layer is done with) when it is big enough."""
        if not fetch.numel():
            return self.root, self.neigh
        shape = (fetch.numel(), self.neigh.size(1))
        size = shape[0] * shape[1]
        if spare is None or spare.dtype != torch.float32 or spare.numel() < size:
            halo = buffers.empty(*shape)
        else:  # products' layer 1: a 148 MB halo in layer 0's 308 MB, no fresh memory
            halo = spare.view(-1)[:size].view(shape)
        self.table.read(fetch, out=halo)
        return self.root, SplitRows(self.neigh, halo) if self.held else halo


def _project(h: Tensor, w: Tensor, buf: Tensor, lead: Tensor, first: int | None) -> None:
    """`buf[lead] = h @ w.T`, straight into `buf` when `lead` is the range from `first`."""
    if first is None:
        _store(buf, lead, None, h @ w.t())
    else:
        _matmul_into(h, w, buf[first : first + lead.numel()])


def _store(buf: Tensor, lead: Tensor, first: int | None, rows: Tensor) -> None:
    """`buf[lead] = rows` (`rows` on any device): one block copy when `lead` is the range
    from `first`."""
    if first is None:
        buf.index_copy_(0, lead, rows.to(buf.device))
    else:
        buf[first : first + lead.numel()].copy_(rows)


def _matmul_into(x: Tensor, w: Tensor, out: Tensor) -> Tensor:
    """`out = x @ w.T`, computed where `w` lives (the model's device), stored in `out`."""
    if x.device == w.device == out.device:
        return torch.matmul(x, w.t(), out=out)
    return out.copy_(x.to(w.device) @ w.t())


def _device_of(net: nn.Module) -> torch.device:
    """Where the model's weights are, so where a pass computes."""
    weight = next(net.parameters(), None)
    return torch.device("cpu") if weight is None else weight.device


def _place(view: GraphView, net: LayerwiseNet, device: torch.device) -> torch.device:
    """Where a pass's buffers (its layer tables) live: where it computes (`device`) when this
    process holds every row (no other process reads its tables) and they fit there, so no
    layer is copied to the device and back; else host memory, where other ranks read them."""
    if view.backend.holds_all and _room(device) >= _need(view, net):
        return device
    return torch.device("cpu")


def _need(view: GraphView, net: LayerwiseNet) -> int:
    """Bytes a pass may hold on its device at most: the input rows and, per layer, two
    padded outputs (the projections) per row, plus the edges (8 bytes each)."""
    floats = 2 * sum(
        net.inference_width(layer) + LINE_FLOATS for layer in range(net.num_inference_layers)
    )
    widths = {t: int(x.shape[1]) if x.dim() > 1 else 1 for t, x in view.inputs.items()}
    rows = sum(n * (floats + widths.get(t, 0)) for t, n in view.num_nodes.items())
    return 4 * rows + 8 * sum(int(col.numel()) for _, col in view.edges.values())


def _room(device: torch.device) -> int:
    """Free bytes on `device` less a tenth of the card, which the training steps after the
    pass need for their activations while kept tables stay (as `auto_budget` leaves for the
    features); host memory is where the buffers go anyway: unbounded."""
    if device.type != "cuda":
        return 1 << 62
    free, total = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return free + cached - total // 10


def _resident_inputs(view: GraphView, device: torch.device) -> dict[str, Tensor]:
    """The view's input rows on `device`, copied there once per view and kept for later passes
    (with kept tables on the device, the inputs are all a pass would copy; on the CPU, or for
    inputs already there, nothing is copied)."""
    key = f"inputs/{device}"
    if key not in view.cache:
        view.cache[key] = {t: x.to(device) for t, x in view.inputs.items()}
    return view.cache[key]


def _to(device: torch.device, rows: Any) -> Any:
    """A layer's rows (a tensor, `SplitRows`, or a pair of them) on `device`: rows already
    there as they are (split rows read in place), others as one tensor each."""
    if isinstance(rows, tuple):
        return tuple(_to(device, r) for r in rows)
    if isinstance(rows, SplitRows):
        if rows.head.device == rows.tail.device == device:
            return rows
        whole = torch.empty(len(rows.head) + len(rows.tail), *rows.head.shape[1:], device=device)
        whole[: len(rows.head)].copy_(rows.head)
        whole[len(rows.head) :].copy_(rows.tail)
        return whole
    return rows.to(device)


class _Run:
    """One layer-wise pass of `net` over `view` (see the module docstring)."""

    def __init__(
        self, model: nn.Module, view: GraphView, chunk_size: int, keep_buffers: bool = False
    ) -> None:
        if chunk_size <= 0:
            raise ValueError(f"chunk_size={chunk_size}: must be > 0 (train.eval_chunk_size)")
        net, embeddings = layerwise_net(model)
        kind = HeteroLayerwiseModel if view.is_hetero else LayerwiseModel
        if not isinstance(net, kind):
            name = type(_bare(model) if net is None else net).__name__
            raise TypeError(f"{name} has no per-layer forward (a {kind.__name__})")
        self.net, self.view, self.chunk = net, view, chunk_size
        self.typed = _Heterogeneous(net) if view.is_hetero else _Homogeneous(net)
        extra = {t: w for t, w in embeddings.items() if t not in view.inputs}
        self.inputs = {**view.inputs, **extra}
        missing = [t for t in view.node_types if t not in self.inputs]
        if missing:
            raise ValueError(f"node types {missing} have neither features nor embeddings")
        self.plan = _plan(view)
        self.device = _device_of(net)
        place = _place(view, net, self.device)
        self.buffers = _Buffers(False, device=place)  # this pass's own, or the view's kept ones
        if keep_buffers:  # page-locked: host buffers a pass on a device copies to and from
            kept = _Buffers(True, place != self.device, place)
            self.buffers = view.cache.setdefault(f"buffers/{place}", kept)
            if view.backend.holds_all and place == self.device:  # tables here: inputs too
                self.inputs.update(_resident_inputs(view, place))

    def _read(self, table: Any, ntype: str, buf: Tensor | None = None) -> Tensor | SplitRows:
        """The layer rows of `table` (see `_ReadPlan`): its local rows, then the fetched ones.

        `buf`: the buffer whose head is the table's shard (a layer output, see `_Table`), so
        the fetched rows go to its tail and nothing is copied; without it (inputs) the rows
        are `SplitRows`: the shard where it lies (e.g. memory-mapped features, holding this
        rank's targets), the fetched rows in a buffer of their own; nothing fetched (one
        process): the table itself; nothing held (a node's other trainers): the fetched rows.
        """
        local, fetch = _shard(table), self.plan.fetch[ntype]
        if not fetch.numel():
            return local
        if buf is None:
            shape = (fetch.numel(), *table.shape[1:])
            fetched = table.read(fetch, out=self.buffers.empty(*shape, dtype=table.dtype))
            return SplitRows(local, fetched) if local.size(0) else fetched
        table.read(fetch, out=buf[self.plan.local[ntype] :])
        return buf

    def _read_projected(
        self, table: Any, ntype: str, weights: tuple[Tensor, Tensor], name: str
    ) -> tuple[tuple[Tensor, Tensor], Any]:
        """((root rows, neighbour rows), the latter's table) of a layer that reads `h`'s two
        projections `(h W_root^T, h W_neigh^T)`: every rank projects the rows it holds once and
        publishes the neighbour side, then reads its halo's PROJECTED rows (fewer columns to
        fetch than `h`'s). A node's other trainers, holding no rows, project their targets'
        fetched `h`. Every read of `h` is done before the barrier, so once it returns no rank
        needs `h` again. Collective; drop the table once every rank has read it."""
        w_root, w_neigh = weights
        local, fetch, n = _shard(table), self.plan.fetch[ntype], self.plan.local[ntype]
        source = local if n else whole(self._read(table, ntype))
        x = source.to(self.device)  # one copy to the model's device (none on the CPU)
        root = _matmul_into(x, w_root, self.buffers.empty(len(source), len(w_root)))
        neigh = self.buffers.empty(n + fetch.numel(), w_neigh.size(0))
        _matmul_into(x[:n], w_neigh, neigh[:n])
        del source, x
        backend = self.view.backend
        ptable = backend.new_table(name, ntype, self.view.num_nodes[ntype], neigh[:n])
        backend.barrier()  # every rank's projected shard exists, and nobody reads `h` any more
        if fetch.numel():
            ptable.read(fetch, out=neigh[n:])
        return (root, neigh), ptable

    def _sink(self, layer: int, ntype: str, name: str, prev: Any) -> _Table | _Projections:
        """Where layer `layer`'s `ntype` rows go: the next layer's two projections when it reads
        those (`h` itself is never stored), else the layer's table (its buffer: `prev`'s root
        projections, when this layer reads those: each chunk adds to its targets' own rows)."""
        held, fetch = self.plan.local[ntype], self.plan.fetch[ntype].numel()
        reads_next = self._reads_after(layer)
        nxt = self.typed.projection(layer + 1) if reads_next else None
        backend, num_rows = self.view.backend, self.view.num_nodes[ntype]
        if nxt is not None:
            w_root, w_neigh = nxt
            # root: at the targets' positions, and big enough to be the next layer's buffer
            roots = held + fetch if not held or self._reads_after(layer + 1) else held
            neigh = self.buffers.empty(held, w_neigh.size(0))
            table = backend.new_table(name + "/projected", ntype, num_rows, neigh[:held])
            scratch = self.buffers.empty(
                min(self.chunk, len(self.view.mine[ntype])), w_root.size(1)
            )
            root = self.buffers.empty(roots, w_root.size(0))
            return _Projections(nxt, root, neigh, table, held, scratch)
        if isinstance(prev, _Projections):
            buf = prev.root
        else:  # a layer reading projections writes their (padded) width
            weights = self.typed.projection(layer)
            width = self.net.inference_width(layer) if weights is None else weights[0].size(0)
            buf = self.buffers.empty(held + (fetch if reads_next else 0), width)
        return _Table(backend.new_table(name, ntype, num_rows, buf[:held]), buf, held)

    def _reads_after(self, layer: int) -> bool:
        """Whether a layer follows `layer` (which then reads its output)."""
        return layer + 1 < self.net.num_inference_layers

    def _degrees(self) -> dict[EdgeType, Tensor]:
        if not self.net.needs_degree:
            return {}
        return {
            et: whole(self._read(table, et[0])).view(-1).to(self.device)
            for et, table in self.view.degree.items()
        }

    def _rows(
        self,
        layer: int,
        round_: int,
        used: list[str],
        prev: dict[str, Any],
        made: list[Any],
        spare: dict[str, Tensor],
    ) -> dict[str, Any]:
        """Layer `layer`'s source rows of the types `used`, from the previous layer's sinks
        (the inputs at layer 0), fetched into the `spare` memory of each type's previous rows
        where they fit. Collective (a projection of the inputs publishes, then fetches); the
        tables to drop after the layer go to `made`."""
        weights = self.typed.projection(layer)
        rows = {}
        for t in used:
            source = prev[t]
            if isinstance(source, _Projections):
                rows[t] = source.read(self.plan.fetch[t], spare.get(t), self.buffers)
            elif isinstance(source, _Table):
                rows[t] = self._read(source.table, t, source.buf)
            elif weights is not None:  # inputs read as projections (layer 0 narrows)
                # not the name of layer 0's own projected output (`_sink`): both exist at once
                # when layer 1 narrows too
                name = self.view.table_name(round_, layer, t) + "/inputs-projected"
                rows[t], table = self._read_projected(source, t, weights, name)
                made.append(table)
            else:
                rows[t] = self._read(source, t)
        return self.typed.prepare(rows)

    def run(self) -> NodeRows:
        """The final layer's tables (every node of every output type), still registered."""
        view, round_ = self.view, self.view.next_round()
        degrees = self._degrees()
        prev: dict[str, Any] = dict(self.inputs)  # each type's previous-layer rows
        made: list[Any] = []  # the tables last layer made (dropped once this layer is done)
        spare: dict[str, Tensor] = {}  # the halo rows last layer fetched, done with
        for layer in range(self.net.num_inference_layers):
            ets = [et for et in self.typed.edge_types(layer, set(prev)) if et in view.edges]
            out_types = sorted({et[-1] for et in ets})
            sinks = {
                t: self._sink(layer, t, view.table_name(round_, layer, t), prev.get(t))
                for t in out_types
            }
            used = sorted({et[0] for et in ets} | set(out_types))
            rows = self._rows(layer, round_, used, prev, made, spare)
            here = {t: _to(self.device, r) for t, r in rows.items()}  # what the chunks read
            for t in out_types:
                self._layer(layer, t, [et for et in ets if et[-1] == t], here, degrees, sinks[t])
            spare = {t: r.tail for t, r in rows.items() if isinstance(r, SplitRows)}
            del rows, here, prev  # freed before the next layer's rows are read (peak: one layer's)
            view.backend.barrier()  # layer complete everywhere before anyone reads it
            self._drop(made)
            made, prev = [s.table for s in sinks.values()], sinks
        width = self.net.inference_width(self.net.num_inference_layers - 1)
        tables = {t: s.table for t, s in prev.items()}
        return NodeRows(view, tables, width, self.buffers, self.device)

    def _drop(self, tables: list[Any]) -> None:
        """Release `tables` (no reference is left behind here: their buffers can go)."""
        for table in tables:
            self.view.backend.drop(table)

    def _layer(
        self,
        layer: int,
        ntype: str,
        ets: list[EdgeType],
        rows: dict[str, Tensor],
        degrees: dict[EdgeType, Tensor],
        sink: _Table | _Projections,
    ) -> None:
        """Layer `layer` of this rank's `ntype` nodes, chunk by chunk, into `sink`.

        Every chunk reads the layer's `rows` in place (its blocks index them by position): no
        per-chunk copy of source rows, whatever the chunk size.
        """
        mine, in_place = self.view.mine[ntype], self.buffers.device == self.device
        for start in range(0, mine.numel(), self.chunk):
            stop = min(start + self.chunk, mine.numel())
            lead = self.plan.mine_pos[ntype][start:stop]  # the targets' own rows
            at = lead.to(self.device)
            inputs = {
                et: (rows[et[0]], self._block(et, start, stop, at, lead, degrees)) for et in ets
            }
            dest = sink.dest(lead) if in_place else None  # else the sinks are in host memory
            result = self.typed.layer(layer, rows[ntype], at, inputs, dest)
            sink.put(mine[start:stop], lead, result, dest)

    def _block(
        self,
        et: EdgeType,
        start: int,
        stop: int,
        at: Tensor,
        lead: Tensor,
        degrees: dict[EdgeType, Tensor],
    ) -> Block:
        """The in-edges of edge type `et` of the targets `mine[start:stop]` (at rows `lead` of
        their type's buffer; `at`: `lead` on the pass's device), over every row of the source
        type's buffer."""
        crow, col = self.view.edges[et]
        lo, hi = int(crow[start]), int(crow[stop])
        src, pos_of = et[0], self.plan.pos_of[et[0]]
        if crow.device == col.device == self.device:  # each chunk maps its own (if any map)
            cols = col[lo:hi] if pos_of is None else pos_of.index_select(0, col[lo:hi])
        else:
            crow, cols = self._device_edges(et)
            cols = cols[lo:hi]
        return Block(
            crow[start : stop + 1] - lo,
            cols,
            self.plan.local[src] + self.plan.fetch[src].numel(),
            degrees.get(et),
            dst=at if et[0] == et[-1] else None,
            dst_host=lead if et[0] == et[-1] else None,
        )

    def _device_edges(self, et: EdgeType) -> tuple[Tensor, Tensor]:
        """`et`'s CSR on the pass's device with columns as row positions (`_ReadPlan.pos_of`),
        moved (columns already there are not) and mapped there once per view and device, and
        kept for later passes (where the edges lie, each chunk maps its own: a map of every
        edge would be 4 bytes an edge, all evaluation)."""
        key = f"edges/{self.device}/{et}"
        if key not in self.view.cache:
            crow, col = self.view.edges[et]
            pos_of, col = self.plan.pos_of[et[0]], col.to(self.device)
            cols = col if pos_of is None else pos_of.to(self.device).index_select(0, col)
            self.view.cache[key] = (crow.to(self.device), cols)
        return self.view.cache[key]


class NodeRows:
    """The last layer's output of every node, as tables sharded like the graph.

    `rows(ids, ntype)` reads any nodes' rows (distributed: one batched call per owner) onto
    the model's `device`, where its decoder scores them; `host_rows` leaves them in host
    memory. `close()` is collective: it waits until every rank is done reading, then frees the
    tables. The tables may hold zero columns past the layer's `width` (`_padded`); rows come
    without.
    """

    def __init__(
        self,
        view: GraphView,
        tables: dict[str, Any],
        width: int,
        buffers: _Buffers,
        device: torch.device,
    ) -> None:
        self.view, self.tables, self.width, self.buffers = view, tables, width, buffers
        self.device = device

    def gather(self, ids: Tensor, ntype: str | None = None) -> Tensor:
        """The rows of `ids`, where the tables are (the pass's buffers)."""
        ntype = ntype or self.view.target
        if ntype not in self.tables:
            raise ValueError(f"the last layer produces no rows for node type {ntype!r}")
        return self.tables[ntype][torch.as_tensor(ids, dtype=torch.long)][:, : self.width]

    def host_rows(self, ids: Tensor, ntype: str | None = None) -> Tensor:
        return self.gather(ids, ntype).cpu()

    def rows(self, ids: Tensor, ntype: str | None = None) -> Tensor:
        return self.gather(ids, ntype).to(self.device)

    def shard(self, ntype: str) -> Tensor:
        """The rows of `ntype` this process holds (see `_shard`)."""
        return _shard(self.tables[ntype])[:, : self.width]

    def close(self) -> None:
        self.view.backend.barrier()  # every rank has read its rows before the tables go
        for table in self.tables.values():
            self.view.backend.drop(table)
        self.tables = {}
        self.buffers.release()  # the next pass may write them: read nothing from them now


@torch.no_grad()
def layerwise_embeddings(
    model: nn.Module, view: GraphView, chunk_size: int, keep_buffers: bool = False
) -> NodeRows:
    """Last-layer rows of every node, computed layer-wise (collective; `close()` the result).

    For link prediction: score any pairs from `rows(ids, ntype)` with the model's decoder.
    `keep_buffers`: the view keeps the pass's buffers for the next one (see `_Buffers`); the
    rows are then valid until the next pass over the view.
    """
    run = _Run(model, view, chunk_size, keep_buffers)
    was_training = _bare(model).training
    _bare(model).eval()
    try:
        return run.run()
    except BaseException:
        run.buffers.release()  # a pass that failed leaves no kept buffer lent out
        raise
    finally:
        _bare(model).train(was_training)


@torch.no_grad()
def layerwise_link_scores(
    model: nn.Module,
    view: GraphView,
    chunk_size: int,
    pairs: Tensor,
    edge_type: EdgeType | None = None,
    keep_buffers: bool = False,
) -> Tensor:
    """`model.score(z[src], z[dst])` of this rank's `pairs` [2, P] (global ids) from layer-wise
    embeddings (`edge_type` names the source/destination node types of a heterogeneous model;
    collective: every rank calls it, with its own pairs, possibly none)."""
    rows = layerwise_embeddings(model, view, chunk_size, keep_buffers)
    try:
        src_type, dst_type = (edge_type[0], edge_type[-1]) if edge_type else (None, None)
        z_src, z_dst = rows.rows(pairs[0], src_type), rows.rows(pairs[1], dst_type)
        return _bare(model).score(z_src, z_dst)
    finally:
        rows.close()


def _own_rows(rows: NodeRows, view: GraphView) -> Tensor:
    """The rows of this process's targets, `view.mine[view.target]`, where the tables are."""
    shard = rows.shard(view.target)
    if range_start(_plan(view).mine_pos[view.target]) == 0 and shard.size(0) == len(
        view.mine[view.target]
    ):
        return shard  # this process holds exactly its targets' rows, in order: no copy
    return rows.gather(view.mine[view.target])


@torch.no_grad()
def layerwise_logits(
    model: nn.Module, view: GraphView, chunk_size: int, keep_buffers: bool = False
) -> Tensor:
    """Last-layer output of every node in `view.mine[view.target]`, computed layer-wise (on
    the model's device), returned in host memory.

    Collective when distributed: every trainer must call it (the same number of times).
    """
    rows = layerwise_embeddings(model, view, chunk_size, keep_buffers)
    try:
        logits = _own_rows(rows, view)
        host = logits.cpu()  # a copy unless the rows are in host memory already
        return host.clone() if keep_buffers and host is logits else host  # kept: written again
    finally:
        rows.close()


def _split_mask(view: GraphView, split: str) -> Tensor:
    """Which of this rank's targets are in `split` (O(nodes) once per view and split: no sort)."""
    key = f"split_mask/{split}"
    if key not in view.cache:
        flags = torch.zeros(view.num_nodes[view.target], dtype=torch.bool)
        flags[view.splits.get(split, torch.empty(0, dtype=torch.long))] = True
        view.cache[key] = flags[view.mine[view.target]]
    return view.cache[key]


def evaluate_layerwise(
    model: nn.Module,
    view: GraphView,
    chunk_size: int,
    splits: tuple[str, ...] = ("val", "test"),
    keep_buffers: bool = False,
) -> dict[str, float]:
    """`{"<split>_acc": ...}` over all ranks from layer-wise logits (collective, like above)."""
    rows = layerwise_embeddings(model, view, chunk_size, keep_buffers)
    try:
        right = row_argmax(_own_rows(rows, view)).cpu() == view.labels  # argmax where they are
    finally:
        rows.close()
    counts = torch.zeros(2 * len(splits), dtype=torch.float64)
    for i, split in enumerate(splits):
        mask = _split_mask(view, split)
        counts[2 * i] = float(right[mask].sum())
        counts[2 * i + 1] = float(mask.sum())
    counts = view.backend.all_reduce(counts)
    return {
        f"{split}_acc": float(counts[2 * i] / counts[2 * i + 1])
        if counts[2 * i + 1]
        else float("nan")
        for i, split in enumerate(splits)
    }
