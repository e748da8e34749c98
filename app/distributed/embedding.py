"""`DistEmbedding`: learnable node embeddings sharded like the graph (DGL's `DistEmbedding`).

For node types without input features. A lookup pulls only the batch's rows (locally or by RPC)
and remembers them; a sparse optimizer (`app.distributed.optim`) later pushes the gradient of
exactly those rows to their owners, which update their shard and its optimizer state in place.
The rows are not module parameters, so DDP never all-reduces the (huge) table.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from app.distributed.tensor import DistTensor, PartitionBook


def uniform_init(scale: float = 0.1) -> Callable[[tuple[int, ...], torch.dtype], torch.Tensor]:
    def init(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype).uniform_(-scale, scale)

    return init


class DistEmbedding:
    """`num_embeddings × embedding_dim` trainable rows, read by global node id.

    Args mirror DGL's (`num_embeddings, embedding_dim, name, init_func`) plus the partition
    placement (`book`, `part_id`, `is_owner`) that DGL takes from its global context.
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        name: str,
        init_func: Callable[[tuple[int, ...], torch.dtype], torch.Tensor] | None = None,
        *,
        book: PartitionBook,
        part_id: int,
        is_owner: bool = True,
    ) -> None:
        self.num_embeddings, self.embedding_dim, self.name = num_embeddings, embedding_dim, name
        self.weight = DistTensor(
            (num_embeddings, embedding_dim),
            torch.float32,
            name,
            book=book,
            part_id=part_id,
            is_owner=is_owner,
            init_func=init_func or uniform_init(),
        )
        self.trace: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows for `ids`; with autograd on, they are recorded for the next optimizer step."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        rows = self.weight[ids]
        if torch.is_grad_enabled():
            rows.requires_grad_(True)
            self.trace.append((ids, rows))
        return rows

    def pop_gradients(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Unique ids touched since the last step and their summed gradients; clears the trace."""
        pairs = [(ids, rows.grad) for ids, rows in self.trace if rows.grad is not None]
        self.trace.clear()
        if not pairs:
            return None
        ids = torch.cat([p[0] for p in pairs])
        grads = torch.cat([p[1] for p in pairs])
        uniq, inverse = torch.unique(ids, return_inverse=True)
        summed = torch.zeros((len(uniq), self.embedding_dim), dtype=grads.dtype)
        summed.index_add_(0, inverse, grads)
        return uniq, summed
