"""The per-layer API a model offers layer-wise inference (`app.inference`), as protocols.

Layer-wise inference computes every node's layer-`l` rows from all rows of layer `l-1`, one
chunk of targets at a time, instead of one sampled neighbourhood per seed. It checks a model
against these protocols once (`app.inference.layerwise.layerwise_net`) and then calls them
directly; a model with neither falls back to sampled evaluation.

- `LayerwiseModel`: a homogeneous network (`SampledGNN`, `MLP`).
- `HeteroLayerwiseModel`: a heterogeneous one (`HeteroSAGE`): a layer runs per edge type.
- `LayerwiseWrapper`: a model whose node rows come from an inner network of either kind
  (the link predictors' encoders, the heterogeneous classifier's GNN), plus the embedding rows
  of featureless node types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from torch import Tensor

if TYPE_CHECKING:
    from app.model.gnn import Block

EdgeType = tuple[str, str, str]


@runtime_checkable
class LayerwiseModel(Protocol):
    """A homogeneous network layer-wise inference can run."""

    needs_degree: bool  # whether `inference_layer` reads `Block.src_degree` (GCN)

    @property
    def num_inference_layers(self) -> int: ...

    def inference_width(self, layer: int) -> int:
        """Output channels of `layer`."""
        ...

    def inference_projection(self, layer: int) -> tuple[Tensor, Tensor] | None:
        """`(W_root, W_neigh)` when `layer` reads its inputs' projections instead of the
        inputs (computed once per source row), else None."""
        ...

    def inference_layer(
        self, layer: int, h_src: Tensor, block: Block, out: Tensor | None = None
    ) -> Tensor:
        """Layer `layer` of the block's targets from its sources' rows `h_src`."""
        ...


@runtime_checkable
class HeteroLayerwiseModel(Protocol):
    """A heterogeneous network layer-wise inference can run, one node type at a time."""

    needs_degree: bool

    @property
    def num_inference_layers(self) -> int: ...

    def inference_width(self, layer: int) -> int: ...

    def inference_edge_types(self, layer: int, types: set[str]) -> list[EdgeType]:
        """The edge types `layer` runs when node types `types` have layer `layer-1` rows."""
        ...

    def inference_layer(
        self, layer: int, h_dst: Tensor, inputs: dict[EdgeType, tuple[Tensor, Block]]
    ) -> Tensor:
        """One chunk of targets of one node type from `{edge type: (h_src, block)}`."""
        ...


@runtime_checkable
class LayerwiseWrapper(Protocol):
    """A model that computes its node rows with an inner layer-wise network."""

    def layerwise_parts(
        self,
    ) -> tuple[LayerwiseModel | HeteroLayerwiseModel, dict[str, Tensor]]:
        """(the inner network, {node type: input embedding rows} of featureless types)."""
        ...
