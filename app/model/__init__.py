"""Models, pure `nn.Module`s (no loaders, optimizers or parallelism): `gnn` homogeneous
SAGE/GCN/GAT/MLP with trim-to-layer and CSR aggregation, `hetero` heterogeneous GraphSAGE with
input embedding rows, `link` encoders + decoders for link prediction; `registry` (`MODELS`:
`model.name` → builder, the list config validation reads), `layerwise` (the per-layer API
layer-wise inference checks, as protocols)."""
