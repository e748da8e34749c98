"""Layer-wise mean aggregation: the prefetching kernel vs the same loop without prefetch.

The shape of one products-scale partition's layer: 1.2M targets with 25 random in-edges each
over a 2M-row source table (own rows + halo), 100 columns (input features) and 47 (a
narrowing SAGE layer's projection), in chunks of 65,536 targets as layer-wise inference runs
them. Both kernels run interleaved on the same arrays, three rounds each; the median is kept.

    python -m bench.layerwise_kernel
"""

from __future__ import annotations

import statistics
import time

import numba
import numpy as np

from app.model.ops.numba_cpu import _csr_mean
from bench.common import record

BENCH = "layerwise_kernel"
SOURCES, TARGETS, DEGREE, CHUNK, OWN = 2_000_000, 1_200_000, 25, 65_536, 1_200_000
WIDTHS, ROUNDS = (100, 47), 3


@numba.njit(nogil=True, cache=True)
def _plain_mean(crow, col, head, tail, out):  # pragma: no cover - compiled
    """`_csr_mean` without the prefetch (the reference)."""
    width, n_head = out.shape[1], head.shape[0]
    for i in range(out.shape[0]):
        row = out[i]
        row[:] = 0
        for j in range(crow[i], crow[i + 1]):
            c = col[j]
            src = head[c] if c < n_head else tail[c - n_head]
            for f in range(width):
                row[f] += src[f]
        if crow[i + 1] > crow[i]:
            scale = np.float32(1.0) / np.float32(crow[i + 1] - crow[i])
            for f in range(width):
                row[f] *= scale


def _layer(kernel, crow, col, head, tail, out) -> float:
    """Seconds for every chunk of the layer."""
    start = time.perf_counter()
    for lo in range(0, TARGETS, CHUNK):
        hi = min(lo + CHUNK, TARGETS)
        e0, e1 = crow[lo], crow[hi]
        kernel(crow[lo : hi + 1] - e0, col[e0:e1], head, tail, out[: hi - lo])
    return time.perf_counter() - start


def main() -> None:
    rng = np.random.default_rng(0)
    crow = np.arange(0, (TARGETS + 1) * DEGREE, DEGREE, dtype=np.int32)
    col = rng.integers(0, SOURCES, TARGETS * DEGREE, dtype=np.int32)
    for width in WIDTHS:
        table = rng.standard_normal((SOURCES, width), dtype=np.float32)
        head, tail = table[:OWN], table[OWN:]
        out = np.empty((CHUNK, width), np.float32)
        ref = np.empty_like(out)
        _plain_mean(crow[:2], col[:DEGREE], head, tail, ref[:1])  # compile / load both
        _csr_mean(crow[:2], col[:DEGREE], head, tail, out[:1])
        times: dict[str, list[float]] = {"plain": [], "prefetch": []}
        for _ in range(ROUNDS):
            times["plain"].append(_layer(_plain_mean, crow, col, head, tail, ref))
            times["prefetch"].append(_layer(_csr_mean, crow, col, head, tail, out))
        if not np.allclose(out, ref, rtol=1e-6, atol=1e-6):
            raise AssertionError("the prefetching kernel disagrees with the reference")
        plain, fast = statistics.median(times["plain"]), statistics.median(times["prefetch"])
        record(BENCH, f"mean_{width}cols_s", fast, "s", "no prefetch", fast / plain)
        print(f"{width} columns: plain {plain:.2f} s, prefetch {fast:.2f} s ({plain / fast:.2f}x)")


if __name__ == "__main__":
    main()
