"""Exact layer-wise full-neighbourhood inference (single process or distributed).

Entry points: `local_view(data)` / `partition_view(part, ctx)` build a `GraphView`;
`evaluate_layerwise(model, view, chunk_size)` returns `{"val_acc", "test_acc"}` (all-reduced);
`layerwise_logits` gives this rank's last-layer rows, `layerwise_embeddings` every node's (for
link prediction; `layerwise_link_scores` scores pairs with the model's decoder);
`supports_layerwise(model)` says whether a model has the per-layer API (and warns, naming it,
when it falls back to sampled evaluation).
"""

from app.inference.layerwise import (
    NodeRows,
    evaluate_layerwise,
    layerwise_embeddings,
    layerwise_link_scores,
    layerwise_logits,
    supports_layerwise,
)
from app.inference.view import GraphView, local_view, partition_view

__all__ = [
    "GraphView",
    "NodeRows",
    "evaluate_layerwise",
    "layerwise_embeddings",
    "layerwise_link_scores",
    "layerwise_logits",
    "local_view",
    "partition_view",
    "supports_layerwise",
]
