"""`LinkNeighborLoader`: seed links (+ negatives) → sampled mini-batches, PyG's link layout.

Binary negatives (random node pairs) are appended with label 0 (given labels are shifted by +1
when they contain 0, as PyG does); triplet negatives are random destinations per positive and
come back as src_index / dst_pos_index / dst_neg_index. Iteration and seeding as `NeighborLoader`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling

from app.loader.batch import LocalGather
from app.loader.epochs import EpochBatching
from app.loader.node_loader import LocalLoader
from app.sampler.buffers import BufferPool
from app.sampler.neighbor import NeighborSampler

NEG_MODES = ("binary", "triplet")


def resolve_neg_sampling(neg_sampling, ratio: float) -> NegativeSampling | None:
    """None | "binary" | "triplet" (amount = ratio) | NegativeSampling → NegativeSampling."""
    if neg_sampling is None or isinstance(neg_sampling, NegativeSampling):
        return neg_sampling
    if neg_sampling not in NEG_MODES:
        raise ValueError(
            f"neg_sampling must be None, {NEG_MODES} or NegativeSampling (got {neg_sampling!r})"
        )
    return NegativeSampling(neg_sampling, ratio)


def resolve_edge_label_index(
    data: Data | HeteroData, edge_label_index
) -> tuple[tuple | None, Tensor]:
    """(input edge type or None, [2, M] seed links) from PyG's accepted forms."""
    if isinstance(data, Data):
        eli = data.edge_index if edge_label_index is None else torch.as_tensor(edge_label_index)
        return None, _check_links(eli, data.num_nodes, data.num_nodes)
    if isinstance(edge_label_index, (tuple, list)) and isinstance(edge_label_index[0], str):
        edge_label_index = (tuple(edge_label_index), None)
    if not (isinstance(edge_label_index, (tuple, list)) and len(edge_label_index) == 2):
        raise ValueError(
            "edge_label_index for HeteroData must be an edge type or (edge_type, [2, M] links)"
        )
    et, eli = edge_label_index
    et = tuple(et)
    if et not in data.edge_types:
        raise ValueError(f"edge type {et} is not one of {data.edge_types}")
    eli = data[et].edge_index if eli is None else torch.as_tensor(eli)
    return et, _check_links(eli, data[et[0]].num_nodes, data[et[-1]].num_nodes)


def _check_links(eli: Tensor, num_src: int, num_dst: int) -> Tensor:
    if eli.dim() != 2 or eli.size(0) != 2:
        raise ValueError(f"edge_label_index must have shape [2, M] (got {list(eli.shape)})")
    eli = eli.long()
    for side, n in ((eli[0], num_src), (eli[1], num_dst)):
        if side.numel() and (int(side.min()) < 0 or int(side.max()) >= n):
            raise ValueError(f"edge_label_index holds ids outside [0, {n})")
    return eli


class LinkNeighborLoader(LocalLoader):
    """Mini-batches of sampled neighbourhoods around seed links (PyG LinkNeighborLoader)."""

    def __init__(
        self,
        data: Data | HeteroData,
        num_neighbors,
        edge_label_index=None,
        edge_label: Tensor | None = None,
        edge_label_time: Tensor | None = None,
        neg_sampling=None,
        neg_sampling_ratio: float = 1.0,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        replace: bool = False,
        subgraph_type: str = "directional",
        disjoint: bool = False,
        time_attr: str | None = None,
        temporal_strategy: str = "uniform",
        seed: int = 0,
        sampler: NeighborSampler | None = None,
    ) -> None:
        self.data = data
        self.sampler = sampler or NeighborSampler(
            data,
            num_neighbors,
            replace=replace,
            subgraph_type=subgraph_type,
            disjoint=disjoint,
            time_attr=time_attr,
            temporal_strategy=temporal_strategy,
            seed=seed,
        )
        self.input_type, self.edge_label_index = resolve_edge_label_index(data, edge_label_index)
        self.neg_sampling = resolve_neg_sampling(neg_sampling, neg_sampling_ratio)
        self.edge_label = self._labels(edge_label)
        num = self.edge_label_index.size(1)
        if time_attr is not None and edge_label_time is None:
            raise ValueError("temporal link sampling (time_attr set) needs edge_label_time")
        for name, t in (("edge_label", self.edge_label), ("edge_label_time", edge_label_time)):
            if t is not None and t.size(0) != num:
                raise ValueError(f"{name} has {t.size(0)} entries for {num} links")
        self.edge_label_time = edge_label_time
        self.batching = EpochBatching(batch_size, shuffle, drop_last, seed)
        self.gather = LocalGather(data, pool=BufferPool(2))  # the batch yielded, the one held
        self.epoch = 0

    def _labels(self, edge_label: Tensor | None) -> Tensor | None:
        ns = self.neg_sampling
        if ns is not None and ns.is_triplet() and edge_label is not None:
            raise ValueError("triplet negative sampling takes no edge_label; drop edge_label")
        if (
            ns is not None
            and edge_label is not None
            and edge_label.numel()
            and edge_label.min() == 0
        ):
            return edge_label + 1  # 0 now means "negative"
        return edge_label

    @property
    def num_inputs(self) -> int:
        return self.edge_label_index.size(1)

    def __iter__(self) -> Iterator[Data | HeteroData]:
        for index, seed in self.epoch_jobs():
            yield self.collate(index, seed)

    def sampler_input(self, index: Tensor) -> EdgeSamplerInput:
        return EdgeSamplerInput(
            input_id=index,
            row=self.edge_label_index[0, index],
            col=self.edge_label_index[1, index],
            label=None if self.edge_label is None else self.edge_label[index],
            time=None if self.edge_label_time is None else self.edge_label_time[index],
            input_type=self.input_type,
        )

    def collate(self, index: Tensor, seed: int | None = None) -> Data | HeteroData:
        """Sample and build one mini-batch from link positions `index`."""
        out = self.sampler.sample_from_edges(self.sampler_input(index), self.neg_sampling, seed)
        mode = (
            "triplet"
            if self.neg_sampling is not None and self.neg_sampling.is_triplet()
            else "binary"
        )
        return self.gather.to_batch(out, self.input_type, link=mode)
