"""`LocalFeatureStore`: PyG's FeatureStore API over one partition's rows (`FeatureStoreCore`).

PyG's surface: `from_data` / `from_hetero_data` (PyG's signatures, rows kept as given),
`put_global_id` / `get_global_id` / `get_local_id`, `put_tensor` / `get_tensor`, edge features
under edge-type groups (`(None, None)` when homogeneous), `lookup_features`, `set_rpc_router`.
The sampler reads the core's state only (`app.distributed.feature_store`, PyG-free, what a
sampler process loads); this subclass adds what PyG's users and loaders call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr
from torch_geometric.data.feature_store import _FieldStatus

from app.distributed import rpc
from app.distributed.feature_store import FeatureStoreCore, Group
from app.partition.book import DictPartitionBook, PartitionBook


@dataclass
class LocalTensorAttr(TensorAttr):
    """A tensor attribute whose index is optional (PyG's name)."""

    def __init__(
        self,
        group_name: Any = _FieldStatus.UNSET,
        attr_name: Any = _FieldStatus.UNSET,
        index: Any = None,
    ):
        super().__init__(group_name, attr_name, index)


class LocalFeatureStore(FeatureStoreCore, FeatureStore):
    """Node features and labels of the local partition; remote rows come by RPC."""

    def __init__(self) -> None:
        FeatureStoreCore.__init__(self)
        FeatureStore.__init__(self, tensor_attr_cls=LocalTensorAttr)

    @classmethod
    def from_data(
        cls,
        node_id: Tensor,
        x: Tensor | None = None,
        y: Tensor | None = None,
        edge_id: Tensor | None = None,
        edge_attr: Tensor | None = None,
    ) -> LocalFeatureStore:
        """PyG's: a one-partition store over homogeneous tensors, rows as given (`node_id` /
        `edge_id`: their global ids; edge features live under group `(None, None)`)."""
        if edge_attr is not None and edge_id is None:
            raise ValueError("'edge_id' needs to be present in case 'edge_attr' is passed")
        store = cls._of({None: node_id}, {None: x}, {None: y}, hetero=False)
        if edge_id is not None:
            store.put_global_id(edge_id, group_name=(None, None))
        if edge_attr is not None:
            store.put_tensor(edge_attr, group_name=(None, None), attr_name="edge_attr")
        return store

    @classmethod
    def from_hetero_data(
        cls,
        node_id_dict: dict[Any, Tensor],
        x_dict: dict[Any, Tensor] | None = None,
        y_dict: dict[Any, Tensor] | None = None,
        edge_id_dict: dict[Any, Tensor] | None = None,
        edge_attr_dict: dict[Any, Tensor] | None = None,
    ) -> LocalFeatureStore:
        """PyG's: a one-partition store over per-type tensors, rows as given."""
        missing = [et for et in edge_attr_dict or {} if et not in (edge_id_dict or {})]
        if missing:
            raise ValueError(f"'edge_id' needs to be present in case 'edge_attr' is passed "
                             f"(edge types {missing})")  # fmt: skip
        store = cls._of(node_id_dict, x_dict or {}, y_dict or {}, hetero=True)
        for et, eid in (edge_id_dict or {}).items():
            store.put_global_id(eid, group_name=et)
        for et, attr in (edge_attr_dict or {}).items():
            store.put_tensor(attr, group_name=et, attr_name="edge_attr")
        return store

    @classmethod
    def _of(cls, ids: dict, xs: dict, ys: dict, hetero: bool) -> LocalFeatureStore:
        """Node ids and x / y per group (PyG's order: every x, then every y)."""
        store = cls()
        for group, gid in ids.items():
            store.put_global_id(gid, group_name=group)
        for name, d in (("x", xs), ("y", ys)):
            for group, value in d.items():
                if value is not None:
                    store._feat[(group, name)] = value
        books: dict[Any, PartitionBook] = {
            g: DictPartitionBook(torch.zeros(int(i.max()) + 1 if i.numel() else 0,
                                             dtype=torch.int64), 1)
            for g, i in ids.items()
        }  # fmt: skip
        store.node_feat_pb = books if hetero else books[None]
        store.meta = {"num_parts": 1, "is_hetero": hetero}
        return store

    def set_rpc_router(self, rpc_router: rpc.RPCRouter | None) -> None:
        """PyG's: route remote lookups with `rpc_router`, and serve this store's rows to peers
        (unless `local_only`)."""
        if not self.local_only and rpc_router is None:
            raise ValueError("An RPC router must be provided")
        self.router = rpc_router
        if not self.local_only:
            from app.distributed import endpoints

            endpoints.serve_features(self, rpc_router)

    @property
    def rpc_router(self) -> rpc.RPCRouter | None:
        """PyG's name of `router`."""
        return self.router

    def lookup_features(
        self, index: Tensor, is_node_feat: bool = True, input_type: Group = None
    ) -> torch.futures.Future:
        """PyG's API: a completed future of the `x` rows (edge features: `edge_attr` rows) of
        global `index`, in request order."""
        if is_node_feat:
            group, name = input_type, "x"
        else:
            group, name = (input_type if self.is_hetero else (None, None)), "edge_attr"
        fut: torch.futures.Future = torch.futures.Future()
        try:
            fut.set_result(self.fetch(index, group, [name])["x" if is_node_feat else name])
        except Exception as err:
            fut.set_exception(err)
        return fut

    # -- FeatureStore API ---------------------------------------------------------------------

    @staticmethod
    def key(attr: TensorAttr) -> tuple[Group, str]:
        """PyG's: the (group, attribute name) a tensor is kept under."""
        return (attr.group_name, attr.attr_name)

    def has_edge_attr(self) -> bool:
        """PyG's: whether some edge type (`(None, None)` when homogeneous) has `edge_attr`."""
        return any(name == "edge_attr" for _, name in self._feat)

    def _put_tensor(self, tensor: Tensor, attr: TensorAttr) -> bool:
        self.put_attr(tensor, attr.group_name, attr.attr_name)
        return True

    def _get_tensor(self, attr: TensorAttr) -> Tensor | None:
        tensor = self._feat.get((attr.group_name, attr.attr_name))
        if tensor is None or attr.index is None:
            return tensor
        return tensor[attr.index]

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        self._views.clear()
        self.put_keys.discard((attr.group_name, attr.attr_name))
        self._by_id.discard((attr.group_name, attr.attr_name))
        return self._feat.pop((attr.group_name, attr.attr_name), None) is not None

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...] | None:
        tensor = self._feat.get((attr.group_name, attr.attr_name))
        return None if tensor is None else tuple(tensor.shape)

    def get_all_tensor_attrs(self) -> list[LocalTensorAttr]:
        return [LocalTensorAttr(g, name) for g, name in self._feat]

    def get_tensor_from_global_id(self, *args: Any, **kwargs: Any) -> Tensor:
        """PyG's: rows of one attribute for owned GLOBAL node ids (`index`), in request order."""
        attr = self._tensor_attr_cls.cast(*args, **kwargs)
        if attr.index is None:
            raise ValueError("get_tensor_from_global_id needs index=<global node ids>")
        name = attr.attr_name
        return self.local_get(torch.as_tensor(attr.index).numpy(), attr.group_name, [name])[name]
