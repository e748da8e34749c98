"""PyG's `torch_geometric.distributed.event_loop` (ours, `app.distributed.pyg.event_loop`)."""

from app.distributed.pyg.event_loop import ConcurrentEventLoop, to_asyncio_future

__all__ = ["ConcurrentEventLoop", "to_asyncio_future"]
