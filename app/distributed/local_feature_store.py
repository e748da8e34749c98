"""PyG's `torch_geometric.distributed.local_feature_store`: `LocalFeatureStore` (ours)."""

from app.distributed.pyg.feature_store import LocalFeatureStore, LocalTensorAttr

__all__ = ["LocalFeatureStore", "LocalTensorAttr"]
