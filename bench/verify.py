"""What content verification costs when a process loads its part (issue 28: bit rot).

    python -m bench verify

A 400k-node synthetic_products graph (100 float32 features, mean degree 25) in 2 random
parts: part 0 holds ~200k nodes. `load_partition(verify=True)` hashes every file it loads
(xxh3 against META.json's checksums) and checks the loaded features for NaN/inf;
`verify=False` only loads (memory-mapped). Alternating repeats with the page cache warm
(the launcher's pre-spawn check has just read the files); the median of each is recorded.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench.common import record

NUM_NODES = 400_000
REPEAT = 5


def _load_s(root: Path, verify: bool) -> float:
    from app.partition.reader import load_partition

    start = time.perf_counter()
    part = load_partition(root, 0, 2, verify=verify)
    _ = part.node_feats["feats"]["x"].sum()  # both sides read the features once
    return time.perf_counter() - start


def main() -> None:
    from app.config import DatasetConfig
    from app.dataset.synthetic import generate_products, to_data
    from app.partition.reader import part_files
    from app.partition.writer import partition_graph

    with tempfile.TemporaryDirectory() as tmp:
        data = to_data(generate_products(DatasetConfig(num_nodes=NUM_NODES), 0))
        root = partition_graph(data, Path(tmp) / "p", 2, method="random").root
        del data
        files = part_files(0) + ["node_map.pt"]
        size = sum((root / f).stat().st_size for f in files)
        _load_s(root, True)  # warm the page cache
        plain, checked = [], []
        for _ in range(REPEAT):
            plain.append(_load_s(root, False))
            checked.append(_load_s(root, True))
        base, full = statistics.median(plain), statistics.median(checked)
        print(f"part 0: {size / 2**20:.0f} MiB in {len(files)} files")
        record("verify", "load_part_plain_s", base, "s")
        record("verify", "load_part_verified_s", full, "s", "load_part_plain_s", full / base)
        record("verify", "verify_cost_s", full - base, "s")
        record("verify", "verify_mib_per_s", size / 2**20 / max(full - base, 1e-9), "MiB/s")


if __name__ == "__main__":
    main()
