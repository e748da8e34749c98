"""Small graphs for the partition tests, and the invariants every written partition keeps:
each edge stored once, on its destination's part, in CSC order with its halo; each node owned
once, its features, labels, time and split membership the original's."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import torch
from torch_geometric.data import Data, HeteroData

from app.contract import SPLITS
from app.partition import load_partition


def community_graph(n: int = 400, e: int = 4000, k: int = 4, seed: int = 0) -> Data:
    """k communities, 90 % of edges inside one; node time; random splits."""
    g = torch.Generator().manual_seed(seed)
    comm = torch.arange(n) % k
    src = torch.randint(0, n, (e,), generator=g)
    same = torch.rand(e, generator=g) < 0.9
    partner = torch.randint(0, n // k, (e,), generator=g) * k + comm[src]
    dst = torch.where(same, partner, torch.randint(0, n, (e,), generator=g))
    split = torch.rand(n, generator=g)
    return Data(
        x=torch.randn(n, 6, generator=g),
        y=torch.randint(0, 3, (n,), generator=g),
        edge_index=torch.stack([src, dst]),
        train_mask=split < 0.5,
        val_mask=(split >= 0.5) & (split < 0.7),
        test_mask=split >= 0.7,
        time=torch.randint(0, 100, (n,), generator=g),
        num_classes=3,
    )


def as_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def _orig(parts: list, ntype) -> torch.Tensor | None:
    o = parts[0].orig_id
    return None if o is None else (o[ntype] if ntype is not None else o)


def check_edges(store, graph: dict, node_maps, p: int, orig_src, orig_dst) -> set[int]:
    """One edge type of part p: ownership, endpoints, CSC order, colptr, halo. Returns edge ids."""
    src_map, dst_map = node_maps
    row, col, eid = graph["row"], graph["col"], graph["edge_id"]
    to_orig = lambda ids, o: ids if o is None else o[ids]  # noqa: E731
    assert torch.equal(to_orig(row, orig_src), store.edge_index[0, eid])
    assert torch.equal(to_orig(col, orig_dst), store.edge_index[1, eid])
    assert bool((dst_map[col] == p).all()), "an edge is stored away from its destination's part"
    assert bool((col[1:] >= col[:-1]).all()), "not in CSC order"
    ptr = graph["colptr"]
    assert ptr.numel() == graph["size"][1] + 1 and int(ptr[-1]) == col.numel()
    assert torch.equal(ptr[1:] - ptr[:-1], torch.bincount(col, minlength=graph["size"][1]))
    remote = row[src_map[row] != p]
    assert torch.equal(graph["halo"], torch.unique(remote))
    return set(eid.tolist())


def _check_nodes(store, nf: dict, seeds: dict, node_map, p: int, orig) -> torch.Tensor:
    ids = nf["global_id"]
    assert bool((node_map[ids] == p).all())
    src = ids if orig is None else orig[ids]
    for key in ("x", "y"):
        if getattr(store, key, None) is not None:
            assert as_bytes(nf["feats"][key]) == as_bytes(store[key][src]), key
        else:
            assert key not in nf["feats"]
    if getattr(store, "time", None) is not None:  # PyG's layout: every node's time, by new id
        assert torch.equal(nf["time"], store.time if orig is None else store.time[orig])
    for split in SPLITS:
        mask = getattr(store, f"{split}_mask", None)
        if mask is not None:
            assert torch.equal(seeds[split], ids[mask[src]])
    return ids


def check_homo(data: Data, root: Path, num_parts: int) -> list:
    parts = [load_partition(root, p, expected_num_parts=num_parts) for p in range(num_parts)]
    node_map, orig = parts[0].node_map, _orig(parts, None)
    edge_map = torch.load(root / "edge_map.pt", weights_only=True)
    owned, edges = [], []
    for p, part in enumerate(parts):
        seen = check_edges(data, part.graph, (node_map, node_map), p, orig, orig)
        assert bool((edge_map[sorted(seen)] == p).all())
        edges.extend(seen)
        owned.append(_check_nodes(data, part.node_feats, part.seeds, node_map, p, orig))
    assert sorted(edges) == list(range(data.num_edges)), "edges lost or duplicated"
    assert torch.equal(torch.sort(torch.cat(owned)).values, torch.arange(data.num_nodes))
    return parts


def check_hetero(data: HeteroData, root: Path, num_parts: int) -> list:
    parts = [load_partition(root, p, expected_num_parts=num_parts) for p in range(num_parts)]
    maps = parts[0].node_map
    edges = defaultdict(list)
    owned = defaultdict(list)
    for p, part in enumerate(parts):
        assert set(part.graph) == set(data.edge_types)
        for et in data.edge_types:
            s, _, d = et
            seen = check_edges(
                data[et], part.graph[et], (maps[s], maps[d]), p, _orig(parts, s), _orig(parts, d)
            )
            edges[et].extend(seen)
        for t in data.node_types:
            seeds = {k: v.get(t) for k, v in part.seeds.items()}
            owned[t].append(
                _check_nodes(data[t], part.node_feats[t], seeds, maps[t], p, _orig(parts, t))
            )
        assert set(part.seeds["train"]) == {"paper"}
        assert part.node_feats["author"]["feats"] == {}
    for et in data.edge_types:
        assert sorted(edges[et]) == list(range(data[et].num_edges)), et
    for t in data.node_types:
        assert torch.equal(torch.sort(torch.cat(owned[t])).values, torch.arange(data[t].num_nodes))
    return parts
