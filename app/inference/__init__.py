"""Exact layer-wise full-neighbourhood inference (single process or distributed).

Entry points: `local_view(data)` / `partition_view(part, ctx)` build a `GraphView`;
`evaluate_layerwise(model, view, chunk_size)` returns `{"val_acc", "test_acc"}` (all-reduced);
`layerwise_logits` gives the raw last-layer rows; `supports_layerwise(model)` says whether a
model has the per-layer API (and warns, naming it, when it falls back to sampled evaluation).
"""

from app.inference.layerwise import evaluate_layerwise, layerwise_logits, supports_layerwise
from app.inference.view import GraphView, local_view, partition_view

__all__ = [
    "GraphView",
    "evaluate_layerwise",
    "layerwise_logits",
    "local_view",
    "partition_view",
    "supports_layerwise",
]
