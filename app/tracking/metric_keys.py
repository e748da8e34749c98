"""Metric names as MLflow stores them: the training metrics open the chart view, the system
metrics sit in a section of their own.

MLflow's chart view (3.x, `RunsChartsCardConfig.getBaseChartAndSectionConfigs`) puts a metric
in the section named by the part of its key before the last '/': keys without one form "Model
metrics", `system/...` forms "System metrics", any other prefix a section of its own. Those
other sections come first (sorted by name), then Model metrics, then System metrics; a
section's charts are sorted by key and titled with the part after the last '/'.

So the training metrics (`loss`, `lr`, `<split>_<measure>` such as `train_acc`, `val_acc`,
`test_auc`, and `emb_change.<type>`) keep their names, the ones `train.monitor` and Lightning
use, and form the first section; every other number a job logs (epoch and evaluation times,
throughput, data wait, cache and wire traffic, start-up, memory) is stored as `system/<name>`,
a '/' inside the name flattened to '_' so that it stays in that one section; `epoch` is not
logged (it is each point's step). `result.json`, the console, the sweep table and `report`
use the plain names: `plain_key` turns a stored key back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

SYSTEM_PREFIX = "system/"
MODEL_SECTION, SYSTEM_SECTION = "Model metrics", "System metrics"
NOT_LOGGED = frozenset({"epoch"})  # the step of every point already
_TRAINING = re.compile(r"loss|lr|(train|val|test)_[A-Za-z0-9_]+|emb_change\.[^/]+")


def is_training(name: str) -> bool:
    """Whether `name` is a training metric (loss, learning rate, a split's score)."""
    return _TRAINING.fullmatch(name) is not None


def stored_key(name: str) -> str | None:
    """The key `name` is logged under in MLflow, or None for a name that is not logged."""
    if name in NOT_LOGGED:
        return None
    if is_training(name) or name.startswith(SYSTEM_PREFIX):
        return name
    return SYSTEM_PREFIX + name.replace("/", "_")


def stored_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """`metrics` under their stored keys, the unlogged ones left out."""
    out = {}
    for name, value in metrics.items():
        key = stored_key(name)
        if key is not None:
            out[key] = value
    return out


def plain_key(key: str) -> str:
    """A stored key as `result.json` and the sweep table name it (`system/` dropped)."""
    return key.removeprefix(SYSTEM_PREFIX)


def plain_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """A run's stored metrics under their plain names."""
    return {plain_key(k): v for k, v in metrics.items()}


def section_of(key: str) -> str:
    """The chart section MLflow's UI puts a stored `key` in."""
    prefix = key.rpartition("/")[0]
    if prefix == "":
        return MODEL_SECTION
    if prefix + "/" == SYSTEM_PREFIX:
        return SYSTEM_SECTION
    return prefix


def chart_sections(keys: Iterable[str]) -> list[tuple[str, list[str]]]:
    """(section, its keys in chart order) in the order MLflow's chart view shows them; its two
    own sections are always there, empty or not."""
    special = (MODEL_SECTION, SYSTEM_SECTION)
    by_section: dict[str, list[str]] = {s: [] for s in special}
    for key in sorted(set(keys)):
        by_section.setdefault(section_of(key), []).append(key)
    order = sorted(s for s in by_section if s not in special)
    return [(s, by_section[s]) for s in (*order, *special)]
