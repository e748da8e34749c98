"""SamplerOutput → mini-batch `Data` / `HeteroData` in PyG NeighborLoader's layout.

`assemble` builds the distributed sampler's batch record (`app.sampler.output.SampledBatch`)
on the trainer: sampler processes send plain tensors and never import PyG.

`to_data` / `to_hetero_data` take node and edge attributes ALREADY gathered for the sampled
nodes/edges, so the distributed loader can call them with features fetched over RPC; `LocalGather`
gathers them from an in-memory graph. Layout (per node/edge type for hetero): node attributes
(x, y, ...), edge_index (local), edge attributes, n_id, e_id, batch (disjoint), num_sampled_nodes,
num_sampled_edges, and on the input type: input_id, batch_size, seed_time, or for links
edge_label_index / edge_label / edge_label_time (binary, or no negatives) or
src_index / dst_pos_index / dst_neg_index / seed_time (triplet).
"""

from __future__ import annotations

from typing import TypeAlias

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput

from app.loader.device_features import DeviceFeatures
from app.sampler.buffers import BufferPool
from app.sampler.output import MISS, SLOT, Attrs, LinkMode, Sample, SampledBatch
from app.sampler.stages import stage

Output: TypeAlias = "SamplerOutput | Sample"  # the local sampler's, or the distributed one's
HeteroOutput: TypeAlias = "HeteroSamplerOutput | Sample"


def _node_meta(store, metadata, num_seeds: int) -> None:
    input_id, seed_time = metadata if metadata is not None else (None, None)
    store.input_id = input_id
    store.batch_size = input_id.numel() if input_id is not None else num_seeds
    if seed_time is not None:
        store.seed_time = seed_time


def _link_meta(data, metadata, link: LinkMode, input_type=None) -> None:
    """Set the link-level fields where PyG's LinkNeighborLoader puts them."""
    src_store = data if input_type is None else data[input_type[0]]
    dst_store = data if input_type is None else data[input_type[-1]]
    edge_store = data if input_type is None else data[input_type]
    edge_store.input_id = metadata[0]
    if link == "triplet":
        src_store.src_index, dst_store.dst_pos_index, dst_store.dst_neg_index = metadata[1:4]
        if metadata[4] is not None:
            src_store.seed_time = dst_store.seed_time = metadata[4]
        return
    edge_store.edge_label_index = metadata[1]
    if metadata[2] is not None:
        edge_store.edge_label = metadata[2]
    if metadata[3] is not None:
        edge_store.edge_label_time = metadata[3]


def edge_index(row: Tensor, col: Tensor) -> Tensor:
    """`[row; col]` as a `[2, E]` tensor: a view where `col` follows `row` in one buffer (the
    local sampler's output), else a stacked copy."""
    e = row.numel()
    adjacent = (
        row.dim() == col.dim() == 1
        and col.numel() == e
        and row.dtype == col.dtype
        and row.is_contiguous()
        and col.is_contiguous()
        and row.untyped_storage().data_ptr() == col.untyped_storage().data_ptr()
        and col.storage_offset() == row.storage_offset() + e
    )
    return row.as_strided((2, e), (e, 1)) if adjacent else torch.stack([row, col])


def to_data(
    out: Output,
    x: Tensor | None = None,
    y: Tensor | None = None,
    *,
    node_attrs: Attrs | None = None,
    edge_attrs: Attrs | None = None,
    link: LinkMode | bool = False,
) -> Data:
    """A homogeneous mini-batch. `x`, `y`, `node_attrs` hold rows for `out.node` (in order),
    `edge_attrs` rows for `out.edge`. `link`: False for node batches, else "binary"/None
    (edge_label_index layout) or "triplet"."""
    data = Data()
    attrs = {"x": x, "y": y, **(node_attrs or {})}
    for key, value in attrs.items():
        if value is not None:
            data[key] = value
    if all(v is None for v in attrs.values()):
        data.num_nodes = out.node.numel()
    data.edge_index = edge_index(out.row, out.col)
    for key, value in (edge_attrs or {}).items():
        data[key] = value
    data.n_id = out.node
    if out.edge is not None:
        data.e_id = out.edge
    if out.batch is not None:
        data.batch = out.batch
    data.num_sampled_nodes = out.num_sampled_nodes
    data.num_sampled_edges = out.num_sampled_edges
    if link is False:
        nsn = out.num_sampled_nodes
        _node_meta(data, out.metadata, nsn[0] if nsn else out.node.numel())
    else:
        _link_meta(data, out.metadata, link)
    return data


def to_hetero_data(
    out: HeteroOutput,
    x: dict[str, Tensor] | None = None,
    y: dict[str, Tensor] | None = None,
    *,
    node_attrs: dict[str, Attrs] | None = None,
    edge_attrs: dict[tuple, Attrs] | None = None,
    input_type: str | tuple[str, str, str] | None = None,
    link: LinkMode | bool = False,
) -> HeteroData:
    """A heterogeneous mini-batch; dicts are keyed by node type (edge type for `edge_attrs`).
    Node types without attributes still get `num_nodes` and `n_id`."""
    data = HeteroData()
    for nt, node in out.node.items():
        store = data[nt]
        attrs = {"x": (x or {}).get(nt), "y": (y or {}).get(nt), **(node_attrs or {}).get(nt, {})}
        attrs = {k: v for k, v in attrs.items() if v is not None}
        for key, value in attrs.items():
            store[key] = value
        if not attrs:
            store.num_nodes = node.numel()
        store.n_id = node
        if out.batch is not None:
            store.batch = out.batch[nt]
        if out.num_sampled_nodes is not None:
            store.num_sampled_nodes = out.num_sampled_nodes[nt]
    for et, row in out.row.items():
        store = data[et]
        store.edge_index = edge_index(row, out.col[et])
        for key, value in (edge_attrs or {}).get(et, {}).items():
            store[key] = value
        if out.edge is not None and out.edge.get(et) is not None:
            store.e_id = out.edge[et]
        if out.num_sampled_edges is not None:
            store.num_sampled_edges = out.num_sampled_edges[et]
    if input_type is None:
        raise ValueError("to_hetero_data needs input_type (the seed node type or edge type)")
    if link is False:
        nsn = out.num_sampled_nodes
        _node_meta(data[input_type], out.metadata, nsn[input_type][0] if nsn else 0)
    else:
        _link_meta(data, out.metadata, link, input_type)
    return data


def assemble(batch: SampledBatch) -> Data | HeteroData:
    """The mini-batch of a distributed sampler's record (`DistNeighborSampler.sample_batch` /
    `sample_edges`), in the local loaders' layout; a record that left out the rows its trainer
    holds (`resident`) keeps, besides the carried rows, each node's slot and the carried rows'
    positions (`SLOT`, `MISS`), from which the trainer fills the batch on its device."""
    with stage("assembly"):
        if batch.hetero:
            return to_hetero_data(
                batch.sample,
                node_attrs=batch.node_attrs,
                edge_attrs=batch.edge_attrs,
                input_type=batch.input_type,
                link=batch.link,
            )
        data = to_data(
            batch.sample, node_attrs=batch.node_attrs, edge_attrs=batch.edge_attrs, link=batch.link
        )
        if batch.resident is not None:  # rows its trainer holds: filled on its device
            data[SLOT] = batch.resident.clamp(min=0)  # int32: index_select takes it
            data[MISS] = (batch.resident < 0).nonzero().view(-1)
        return data


class LocalGather:
    """Gathers every node-level and edge-level attribute of an in-memory graph for a sample.

    `features` (homogeneous graphs) serve the named node attributes from a device copy or
    cache (`DeviceFeatures`) instead of the graph.

    Attribute names are resolved once at construction (per node/edge type for HeteroData), so a
    batch costs one `index_select` per attribute, written into a buffer of `pool` (memory
    already paged in, see `BufferPool`) when one is given.
    """

    def __init__(
        self,
        data: Data | HeteroData,
        features: dict[str, DeviceFeatures] | None = None,
        pool: BufferPool | None = None,
    ):
        self.data, self.features, self.pool = data, features or {}, pool
        self.hetero = isinstance(data, HeteroData)
        if self.hetero:
            self.node_keys = {s._key: _keys(s, node=True) for s in data.node_stores}
            self.edge_keys = {s._key: _keys(s, node=False) for s in data.edge_stores}
        else:
            self.node_keys = [k for k in _keys(data._store, node=True) if k not in self.features]
            self.edge_keys = _keys(data._store, node=False)

    def __call__(self, out: SamplerOutput | HeteroSamplerOutput) -> tuple[dict, dict]:
        """(node_attrs, edge_attrs) ready for `to_data` / `to_hetero_data`."""
        if not self.hetero:
            nodes = _take(
                self.data, self.node_keys, _host(out.node, bool(self.node_keys)), self.pool
            )
            with stage("features"):
                nodes.update({key: rows(out.node) for key, rows in self.features.items()})
            return nodes, _take(self.data, self.edge_keys, _host(out.edge, bool(self.edge_keys)))
        nodes = {
            nt: _take(self.data[nt], keys, out.node.get(nt), self.pool, f"{nt}.")
            for nt, keys in self.node_keys.items()
        }
        edges = {
            et: _take(self.data[et], keys, (out.edge or {}).get(et))
            for et, keys in self.edge_keys.items()
        }
        return nodes, edges

    def to_batch(self, out, input_type=None, link: LinkMode | bool = False) -> Data | HeteroData:
        """Gather and build the mini-batch in one call."""
        node_attrs, edge_attrs = self(out)
        with stage("assembly"):
            if self.hetero:
                return to_hetero_data(
                    out,
                    node_attrs=node_attrs,
                    edge_attrs=edge_attrs,
                    input_type=input_type,
                    link=link,
                )
            return to_data(out, node_attrs=node_attrs, edge_attrs=edge_attrs, link=link)


def _keys(store, node: bool) -> list[str]:
    keys = []
    for key, value in store.items():
        if not isinstance(value, Tensor) or key in ("edge_index", "num_nodes"):
            continue
        if (store.is_node_attr(key) if node else store.is_edge_attr(key)) and value.dim() > 0:
            keys.append(key)
    return keys


def whole_attrs(data: Data) -> list[str]:
    """The node attributes besides `x` that a job sampling on its device holds there whole
    (`DeviceFeatures` for `LocalGather`): `y`, and every one of at most 8 bytes per node (split
    masks, ids, times), a small fraction of the CSC the device holds anyway. A batch then
    gathers them there, and reads no ids back unless a wider attribute stays in host memory."""
    return [
        key
        for key in _keys(data._store, node=True)
        if key != "x" and (key == "y" or data[key][:1].numel() * data[key].element_size() <= 8)
    ]


def _host(index: Tensor | None, wanted: bool) -> Tensor | None:
    """`index` on the host when host-held attributes are gathered with it (`wanted`): a GPU
    sampler's ids read back once for all of them (each `index.to(host)` would wait for the
    device again); host ids as they are."""
    return index.cpu() if wanted and index is not None else index


def _take(
    store, keys: list[str], index: Tensor | None, pool: BufferPool | None = None, prefix: str = ""
) -> Attrs:
    """Rows `index` of each attribute `keys` of `store`: into a buffer of `pool` if given
    (host-held attributes; buffers named `prefix + key`, one kind per node type), else a new
    tensor."""
    if index is None:
        return {}
    out = {}
    for key in keys:
        value = store[key]
        with stage("features" if value.is_floating_point() else "labels"):
            if index.device != value.device:  # GPU sampler ids, a GPU-held attribute
                index = index.to(value.device)
            if pool is None or value.device.type != "cpu":
                out[key] = value.index_select(0, index)
                continue
            rows = pool.rows(prefix + key, index.numel(), tuple(value.shape[1:]), value.dtype)
            out[key] = torch.index_select(value, 0, index, out=rows)
    return out
