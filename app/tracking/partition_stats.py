"""One naming scheme for a partition's stats in every run, whoever logs them.

The partition task logs `partition/part0_nodes`, training runs `partition.part0.nodes`; both are
read here into `{"scalars": {"edge_cut": ...}, "parts": [{"part": 0, "nodes": ...}, ...]}` and
logged as params `partition_stats.<stat>` (scalars only; `partition.*` params are the config's
own keys), `partition_stats.json` and one PNG of the per-part bars: constants of a run, not 25
single-point metric charts.
"""

from __future__ import annotations

import re
from typing import Any

PREFIXES = ("partition.", "partition/")
_PART_KEY = re.compile(r"^part(?P<part>\d+)[._](?P<stat>\w+)$")


def is_partition_key(key: str) -> bool:
    return key.startswith(PREFIXES)


def normalise(flat: dict[str, Any]) -> dict[str, Any]:
    """Flat `partition.*` / `partition/*` numbers (either scheme) as scalars + per-part rows."""
    scalars: dict[str, float] = {}
    parts: dict[int, dict[str, float]] = {}
    for key, value in flat.items():
        name = key[len("partition.") :]
        found = _PART_KEY.match(name)
        if found:
            p = int(found["part"])
            parts.setdefault(p, {"part": p})[found["stat"]] = value
        else:
            scalars[name] = value
    return {"scalars": scalars, "parts": [parts[p] for p in sorted(parts)]}


def from_meta_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """META.json's `stats` (`edge_cut`, ..., `parts: [{part, nodes, ...}]`) in the same shape."""
    scalars = {k: v for k, v in stats.items() if isinstance(v, int | float)}
    parts = [dict(row) for row in stats.get("parts", [])]
    return {"scalars": scalars, "parts": parts}


PARAM_PREFIX = "partition_stats."


def _number(value: Any) -> str:
    """123.0 -> "123", 0.123456 -> "0.1235": params are strings, keep them readable."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def as_params(stats: dict[str, Any]) -> dict[str, str]:
    """`partition_stats.<stat>` params of the scalars (and `num_parts` from the rows)."""
    params = {f"{PARAM_PREFIX}{k}": _number(v) for k, v in stats["scalars"].items()}
    if stats["parts"]:
        params.setdefault(f"{PARAM_PREFIX}num_parts", str(len(stats["parts"])))
    return params
