"""What touching memory costs on this machine: fresh pages vs pages freed a moment ago.

    python -m bench fresh_memory

A first layer-wise evaluation writes ~0.8 GB per trainer into buffers it has never touched
(fetched halo rows, projections); later ones reuse them (`train.eval_keep_buffers`). How much
that first touch costs is a property of the machine, not of the code: on this VM the balloon
driver reports free 2 MB blocks to the host a few seconds after they are freed, and the host
backs them again on the next touch. The measuring process (huge pages, as the launcher gives
its processes: `THP_MEM_ALLOC_ENABLE=1`, `glibc.malloc.hugetlb=1`) sleeps `SETTLE_S`, so the
memory the kernel hands it has been free that long, then allocates and fills `SIZE` bytes
(fresh), frees them and at once allocates and fills them again (reused). Records: microseconds
per KB touched, fresh (ratio: ÷ reused).

4 kB pages are no way out: they are served first from free fragments smaller than 2 MB, which
the balloon does not report, so a lone test like this one finds them cheap (0.5 us/KB), but a
job's gigabytes outrun those fragments. Measured once those were used up (another process
holding 6 GB): 2.9 us/KB fresh, 0.4 reused; and a products job with 4 kB pages everywhere
(both settings off) evaluated no faster (6.05 / 6.90 vs 6.39 / 6.17 s, alternating).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from bench.common import record

SIZE = 1 << 30
SETTLE_S = 10.0
HUGE_PAGES = {"THP_MEM_ALLOC_ENABLE": "1", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}


def _touch_us_per_kb() -> float:
    import torch

    start = time.perf_counter()
    torch.empty(SIZE // 4).fill_(1.0)  # freed on return
    return (time.perf_counter() - start) / (SIZE / 1024) * 1e6


def _child() -> None:
    """In the measuring process: (fresh, reused) µs per KB, as JSON on stdout."""
    import torch

    torch.set_num_threads(1)
    time.sleep(SETTLE_S)
    fresh = _touch_us_per_kb()
    print(json.dumps([fresh, _touch_us_per_kb()]))


def main() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.fresh_memory", "--child"],
        env={**os.environ, **HUGE_PAGES},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    fresh, reused = json.loads(out.strip().splitlines()[-1])
    record("fresh_memory", "reused_us_per_kb", reused, "us/KB")
    record("fresh_memory", "fresh_us_per_kb", fresh, "us/KB", "reused", fresh / reused)


if __name__ == "__main__":
    _child() if sys.argv[1:] == ["--child"] else main()
