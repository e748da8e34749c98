"""Graphs for the distributed tests, and their partitions: written by the project's writer
(`partition_graph`, METIS) or, for the hetero graph, here in the same on-disk format with a
seeded random assignment.

Node i has features `x[i] = [i, i + .5, ...]` and label `i % 7`, so any gathered row can be
checked against its global id. Partitions keep each owned column's edges in their original
order (stable CSC), as the partition writer does, so seeded samples can be compared exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch_geometric.data import Data

from app.partition.assign import random_assign
from app.partition.reader import csc_pointer, file_checksum, halo_of, type_str
from app.partition.writer import partition_graph
from app.sampler.csc import to_csc

NUM_CLASSES = 7


def node_features(n: int, dim: int = 4, offset: float = 0.0) -> torch.Tensor:
    ids = torch.arange(n, dtype=torch.float32).unsqueeze(1) + offset
    return ids + 0.5 * torch.arange(dim, dtype=torch.float32)


def random_graph(n: int, avg_deg: int, seed: int) -> torch.Tensor:
    """Directed edges with clustered structure (so METIS has something to find) + noise."""
    gen = torch.Generator().manual_seed(seed)
    e = n * avg_deg
    src = torch.randint(n, (e,), generator=gen)
    near = (src + torch.randint(-20, 21, (e,), generator=gen)) % n
    far = torch.randint(n, (e,), generator=gen)
    dst = torch.where(torch.rand(e, generator=gen) < 0.8, near, far)
    return torch.stack([src, dst])


def _save(obj: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)


def _part_graph(
    edge_index: torch.Tensor, dst_map: torch.Tensor, src_map: torch.Tensor, p: int, size: tuple
) -> dict:
    """Owned in-edges of part p in stable CSC order over global ids."""
    eids = torch.nonzero(dst_map[edge_index[1]] == p).view(-1)
    sub = edge_index[:, eids]
    colptr, row, perm = to_csc(sub, max(size))
    colptr = colptr[: size[1] + 1]  # columns past N_dst are empty
    perm = torch.from_numpy(perm)
    col = sub[1, perm]
    assert torch.equal(torch.from_numpy(colptr), csc_pointer(col, size[1]))
    row = torch.from_numpy(row)
    return {"row": row, "col": col, "edge_id": eids[perm], "size": torch.tensor(size),
            "colptr": torch.from_numpy(colptr), "halo": halo_of(row, src_map, p)}  # fmt: skip


def write_homo(
    root: Path, edge_index: torch.Tensor, x: torch.Tensor, y: torch.Tensor, num_parts: int
) -> None:
    """Partition a homogeneous graph with the project's writer (METIS) into `root`."""
    data = Data(x=x, y=y, edge_index=edge_index, num_nodes=x.size(0))
    partition_graph(data, root, num_parts, method="metis")


def write_hetero(root: Path, graph: dict, num_parts: int) -> dict:
    """Partition a hetero graph ({'num_nodes','edge_index','x','y'} per type) at random."""
    nums, eis = graph["num_nodes"], graph["edge_index"]
    maps = {t: random_assign(n, num_parts, seed=3) for t, n in nums.items()}
    meta = {"num_parts": num_parts, "is_hetero": True, "node_types": list(nums),
            "edge_types": [list(et) for et in eis], "is_sorted": True, "format_version": 1}  # fmt: skip
    for t, m in maps.items():
        _save(m, root / "node_map" / f"{type_str(t)}.pt")
    for et, ei in eis.items():
        _save(maps[et[2]][ei[1]], root / "edge_map" / f"{type_str(et)}.pt")
    for p in range(num_parts):
        parts = {
            et: _part_graph(ei, maps[et[2]], maps[et[0]], p, (nums[et[0]], nums[et[2]]))
            for et, ei in eis.items()
        }
        _save(parts, root / f"part_{p}" / "graph.pt")
        feats = {}
        for t in nums:
            owned = torch.nonzero(maps[t] == p).view(-1)
            f = {
                k: v[owned]
                for k, v in (("x", graph["x"].get(t)), ("y", graph["y"].get(t)))
                if v is not None
            }
            feats[t] = {"global_id": owned, "feats": f}
        _save(feats, root / f"part_{p}" / "node_feats.pt")
        _save({"train": feats["paper"]["global_id"]}, root / f"part_{p}" / "seeds.pt")
        _save({}, root / f"part_{p}" / "edge_feats.pt")  # no edge features (the writer's layout)
    # every file's checksum, as the writer records them: loading verifies them
    files = sorted(f for f in root.rglob("*.pt") if f.is_file())
    meta["checksums"] = {str(f.relative_to(root)): file_checksum(f) for f in files}
    (root / "META.json").write_text(json.dumps(meta))
    return maps


def hetero_graph(seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    nums = {"paper": 300, "author": 200}
    writes = torch.stack(
        [torch.randint(200, (900,), generator=gen), torch.randint(300, (900,), generator=gen)]
    )
    cites = torch.stack(
        [torch.randint(300, (1200,), generator=gen), torch.randint(300, (1200,), generator=gen)]
    )
    eis = {
        ("author", "writes", "paper"): writes,
        ("paper", "rev_writes", "author"): writes.flip(0),
        ("paper", "cites", "paper"): cites,
    }
    x = {"paper": node_features(300, 4)}
    y = {"paper": torch.arange(300) % NUM_CLASSES}
    return {"num_nodes": nums, "edge_index": eis, "x": x, "y": y}
