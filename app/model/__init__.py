"""Models (no parallelism inside): `gnn` homogeneous SAGE/GCN/GAT/MLP with trim-to-layer and
CSR aggregation, `hetero` heterogeneous GraphSAGE with input embeddings, `link` encoders +
decoders for link prediction."""
