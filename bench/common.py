"""Shared by every benchmark: timing helpers and the results file `outputs/bench/results.json`.

Each record is `{bench, metric, value, unit, compared_to, ratio}`; `compared_to`/`ratio` name
the side-by-side reference measured in the same run, when there is one. Records with the same
(bench, metric) replace older ones, so benches can run one at a time or all together.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from app.fsutil import write_text_atomic

RESULTS = Path(os.environ.get("DISTGNN_BENCH_OUT", "outputs/bench/results.json"))


def record(
    bench: str,
    metric: str,
    value: float,
    unit: str,
    compared_to: str | None = None,
    ratio: float | None = None,
) -> dict[str, Any]:
    """Add one measurement to the results file (atomically) and print it as a table row."""
    rec = {
        "bench": bench,
        "metric": metric,
        "value": round(float(value), 6),
        "unit": unit,
        "compared_to": compared_to,
        "ratio": None if ratio is None else round(float(ratio), 4),
    }
    rows = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    rows = [r for r in rows if (r["bench"], r["metric"]) != (bench, metric)] + [rec]
    write_text_atomic(RESULTS, json.dumps(rows, indent=1))
    vs = f"  ({rec['ratio']}x {compared_to})" if compared_to and ratio is not None else ""
    print(f"{bench:<22} {metric:<34} {rec['value']:>14,.3f} {unit:<10}{vs}", flush=True)
    return rec
