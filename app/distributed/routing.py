"""Splitting a request's ids by the partition that owns them (the first step of every
distributed lookup: hops, feature rows)."""

from __future__ import annotations

import numpy as np


def split_by_owner(owner: np.ndarray) -> dict[int, np.ndarray | None]:
    """Partition → positions it owns (ascending); None means "all of them" (the common case)."""
    if owner.size == 0:
        return {}
    lo, hi = int(owner.min()), int(owner.max())
    if lo == hi:
        return {lo: None}
    order = np.argsort(owner, kind="stable")
    bounds = np.cumsum(np.bincount(owner, minlength=hi + 1))
    return {p: order[bounds[p] - c : bounds[p]] for p, c in enumerate(np.bincount(owner)) if c}
