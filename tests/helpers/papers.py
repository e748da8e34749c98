"""ogbn-papers100M's on-disk layout, written tiny (the loader's tests read it)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd


def write_csv(path: Path, ids: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        pd.DataFrame(ids.reshape(-1, 1)).to_csv(fh, header=False, index=False)


def write_tiny_papers100m(root: Path, n: int = 40) -> dict:
    """ogbn-papers100M in OGB's binary layout (what papers100M-bin.zip unpacks to), tiny."""
    rng = np.random.default_rng(0)
    base = root / "ogbn_papers100M"
    (base / "raw").mkdir(parents=True)
    (base / "RELEASE_v1.txt").write_text("tiny\n")
    edges = np.array([(i, (i + 3) % n) for i in range(n)] + [(0, 7)]).T  # directed citations
    feat = rng.standard_normal((n, 128)).astype(np.float32)
    np.savez_compressed(
        base / "raw/data.npz", edge_index=edges, node_feat=feat,
        node_year=rng.integers(1990, 2020, (n, 1)), num_nodes_list=np.array([n]),
        num_edges_list=np.array([edges.shape[1]]),
    )  # fmt: skip
    label = np.full((n, 1), np.nan, dtype=np.float32)
    idx = rng.permutation(n)
    split = {"train": idx[:10], "valid": idx[10:14], "test": idx[14:20]}
    labelled = np.concatenate(list(split.values()))
    label[labelled, 0] = rng.integers(0, 172, len(labelled))
    np.savez_compressed(base / "raw/node-label.npz", node_label=label)
    for name, ids in split.items():
        write_csv(base / f"split/time/{name}.csv.gz", ids)
    return {"edges": edges, "feat": feat, "label": label[:, 0], "split": split}
