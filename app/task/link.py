"""Link prediction, homogeneous (the graph's own edges) or heterogeneous (one edge type).

Training batches use `loader.neg_sampling` / `loader.neg_sampling_ratio`. Evaluation, the same
at every node count: triplet batches with `train.eval_negatives` random destinations per
held-out positive; `mrr` ranks each positive among all of them, `auc` is the binary ROC-AUC of
the positives against their FIRST negative (one negative per positive), and `acc` is the
fraction of positives scored above all their negatives.

Layer-wise evaluation (`train.eval_mode=layerwise`, `app.task.evaluate`) gets every node's
embedding from exact full-neighbourhood inference and scores the same triplets from those rows
(`layerwise_results`); its negatives are drawn once per rank and split from the loader seed, so
every evaluation of a run ranks the positives against the same destinations.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import HeteroData

from app.contract import SPLITS
from app.loader.protocol import TrainLoader
from app.model.hetero import check_hetero_model
from app.model.link import build_hetero_link_predictor, build_link_predictor
from app.task.base import Task
from app.task.source import loader_seed
from app.task.step import StepResult


class LinkTask(Task):
    """BCE on scored pairs; `auc` / `mrr` / `acc` on held-out edges."""

    def build_model(self) -> nn.Module:
        s, m = self.schema, self.cfg.model
        if not s.hetero:
            return build_link_predictor(self.cfg, s.widths[""])
        check_hetero_model(m.name)
        edge_type, _ = self.source.link_edges("train")
        return build_hetero_link_predictor(
            m, s.metadata, self.in_channels(), edge_type, self.tables
        )

    def loader(self, split: str) -> TrainLoader:
        edge_type, edges = self.source.link_edges(split)
        ld = self.cfg.loader
        if split == "train":
            return self.source.link_loader(
                split, edges, edge_type, ld.neg_sampling, ld.neg_sampling_ratio
            )
        return self.source.link_loader(
            split, edges, edge_type, "triplet", self.cfg.train.eval_negatives
        )

    def step(self, model: nn.Module, batch: Any) -> StepResult:
        return link_step(model, batch)

    def layerwise_results(self, rows: Any, split: str) -> Iterator[StepResult]:
        """Triplet results of this rank's held-out `split` links from layer-wise embeddings
        (`rows`: `app.inference.NodeRows`), `train.eval_negatives` random destinations each."""
        edge_type, pos = self.source.link_edges(split)
        num_dst = self.schema.num_nodes[edge_type[-1] if edge_type else ""]
        gen = torch.Generator().manual_seed(
            loader_seed(self.cfg, self.source.rank) * len(SPLITS) + SPLITS.index(split)
        )
        neg = torch.randint(num_dst, (pos.size(1), self.cfg.train.eval_negatives), generator=gen)
        chunk = self.cfg.train.eval_chunk_size
        return triplet_results(self.bare, rows, pos, neg, edge_type, chunk)


@torch.no_grad()
def triplet_results(
    model: nn.Module,
    rows: Any,
    pos: Tensor,
    neg: Tensor,
    edge_type: Any,
    chunk_size: int,
) -> Iterator[StepResult]:
    """`_triplet` results of positives `pos` [2, P] against destinations `neg` [P, r] (global
    ids), scored by `model.score` from embedding `rows` (`rows(ids, node_type)`), about
    `chunk_size` pairs at a time (each chunk reads its rows in one batched call per owner)."""
    src_type, dst_type = (edge_type[0], edge_type[-1]) if edge_type else (None, None)
    per = max(1, chunk_size // (1 + neg.size(1)))
    for start in range(0, pos.size(1), per):
        p, n = pos[:, start : start + per], neg[start : start + per]
        dst = torch.cat([p[1].unsqueeze(1), n], dim=1)  # [B, 1 + r]: positive first
        z_src = rows.rows(p[0], src_type)
        z_dst = rows.rows(dst.reshape(-1), dst_type).view(*dst.shape, -1)
        scores = model.score(z_src.unsqueeze(1).expand_as(z_dst), z_dst)
        yield _triplet(scores[:, 0], scores[:, 1:], 0)


def link_step(model: nn.Module, batch: Any) -> StepResult:
    """BCE on a batch's scored pairs: binary (`edge_label`) or triplet (`dst_neg_index`) layout.

    `model` is a link predictor or its DDP wrapper; the pairs are scored inside its forward, so
    DDP counts the decoder's weights once (see `app.model.link`).
    """
    bare = getattr(model, "module", model)
    src_store, dst_store, edge_store = _stores(batch, bare.edge_type)
    edges = _num_edges(batch)
    if "src_index" in src_store:
        src = src_store.src_index
        neg_index = dst_store.dst_neg_index.view(src.numel(), -1)
        dst = torch.cat([dst_store.dst_pos_index.unsqueeze(1), neg_index], dim=1)
        _, _, scores = model(batch, (src.unsqueeze(1).expand_as(dst), dst))
        return _triplet(scores[:, 0], scores[:, 1:], edges)
    eli, label = edge_store.edge_label_index, edge_store.edge_label.float()
    _, _, scores = model(batch, (eli[0], eli[1]))
    loss = F.binary_cross_entropy_with_logits(scores, label)
    correct = ((scores > 0).float() == label).sum()
    return StepResult(loss, correct, label.numel(), edges, scores.detach(), label.detach())


def _triplet(pos: Tensor, neg: Tensor, edges: int) -> StepResult:
    """BCE on positives vs. their negatives ([B], [B, r] scores); AUC over the first negative,
    MRR over all."""
    ones, zeros = torch.ones_like(pos), torch.zeros_like(neg)
    loss = F.binary_cross_entropy_with_logits(
        torch.cat([pos, neg.reshape(-1)]), torch.cat([ones, zeros.reshape(-1)])
    )
    rr = 1.0 / (1 + (neg >= pos[:, None]).sum(dim=1)).to(torch.float64)
    correct = (neg < pos[:, None]).all(dim=1).sum()
    scores = torch.cat([pos, neg[:, 0]]).detach()
    labels = torch.cat([ones, zeros[:, 0]]).long()
    return StepResult(loss, correct, pos.numel(), edges, scores, labels, rr.detach())


def _stores(batch: Any, edge_type: Any) -> tuple[Any, Any, Any]:
    if edge_type is None:
        return batch, batch, batch
    return batch[edge_type[0]], batch[edge_type[-1]], batch[edge_type]


def _num_edges(batch: Any) -> int:
    if isinstance(batch, HeteroData):
        return sum(int(batch[et].edge_index.size(1)) for et in batch.edge_types)
    return int(batch.edge_index.size(1))
