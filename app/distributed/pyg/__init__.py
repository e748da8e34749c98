"""PyG's `torch_geometric.distributed` surface over the engine (`app.distributed.engine`).

Its classes take PyG's keywords and translate them into the engine's records once; nothing
else in app/ imports this package but `app.distributed` itself (its exports and the alias
modules PyG's own tests import by name).
"""
