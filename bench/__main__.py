"""`make bench`: every benchmark in one run; the table on stdout, records in results.json.

Each bench measures its reference side by side in the same run (see each module's docstring).
`python -m bench NAME ...` runs only the named ones. The products-scale runs are opt-in
(`make bench-products`: `bench.partition --products` and `bench.products_job`;
`python -m bench.dataset_gen`) because they take many minutes.
"""

from __future__ import annotations

import importlib
import sys
import time

from bench.common import RESULTS

BENCHES = [
    "sampler",  # kernel + local loader throughput (issue: fast local sampler)
    "model",  # trimmed, CSR-aggregating GraphSAGE step vs plain PyG
    "partition",  # METIS vs random, 2 and 4 parts, 200k nodes
    "dist_sampling",  # 2-partition distributed loader vs local loader, PSS
    "resident",  # what a trainer holding its rows saves the data path (held vs sent)
    "embedding",  # DistEmbedding lookup / sparse update, 1 vs 2 partitions
    "e2e",  # end-to-end epochs, 1 and 2 local nodes
    "e2e_hetero_link",  # mag_hetero and products_link epochs
    "eval",  # val+test evaluation: layer-wise (exact) vs sampled, 1 process and 2 partitions
    "layerwise_kernel",  # layer-wise mean aggregation with vs without software prefetch
    "fresh_memory",  # what touching fresh vs just-freed memory costs on this machine
    "verify",  # content verification of a loaded part (xxh3 + NaN check), 200k nodes
    "wire_bytes",  # bytes per batch on the wire of a 2-node job: as stored, 16-bit in transit
    "hosts",  # the e2e job across 2 and 3 testbed hosts, unshaped and shaped (root + netns)
    "cold_start",  # first batch / first epoch: fresh vs installed kernel cache, vs PyG
]


def main(names: list[str]) -> None:
    unknown = sorted(set(names) - set(BENCHES))
    if unknown:
        raise SystemExit(f"unknown bench {', '.join(unknown)}; choose from {', '.join(BENCHES)}")
    for name in names or BENCHES:
        start = time.perf_counter()
        print(f"== bench.{name}", flush=True)
        module = importlib.import_module(f"bench.{name}")
        module.main()
        print(f"== bench.{name} done in {time.perf_counter() - start:.0f} s", flush=True)
    print(f"results: {RESULTS}")


if __name__ == "__main__":
    selected = sys.argv[1:]
    del sys.argv[1:]  # each bench's main() reads its own argv: give it none (its defaults)
    main(selected)
