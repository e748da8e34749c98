"""PNG plots attached to MLflow runs: the learning curves, and the partition's per-part sizes.

matplotlib (installed with MLflow) is imported lazily and used through `Figure` (drawn by Agg,
without pyplot), so plotting works without a display, touches no global state, and costs
nothing to processes that never plot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Panels of the learning-curve figure: (title, metric names drawn in it when present).
CURVE_PANELS = (
    ("loss", ("loss",)),
    (
        "accuracy / AUC / MRR",
        ("train_acc", "val_acc", "test_acc", "val_auc", "test_auc", "val_mrr", "test_mrr"),
    ),
    ("throughput (seeds/s)", ("seeds_per_s",)),
    (
        "epoch and evaluation time (s), data wait (fraction)",
        ("epoch_time_s", "eval_time_s", "data_wait_frac"),
    ),
)
PART_BARS = ("nodes", "edges", "halo", "train")


def _figure(**kwargs: Any):
    """A matplotlib Figure drawn by the Agg canvas: no pyplot, no GUI backend, no global state."""
    import logging

    from matplotlib.figure import Figure

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    return Figure(layout="constrained", **kwargs)


def learning_curves(history: dict[str, list[tuple[int, float]]], path: Path, title: str) -> bool:
    """Write a 2x2 figure of the per-epoch metrics in `history` to `path`; False if none."""
    panels = [(name, [m for m in keys if m in history]) for name, keys in CURVE_PANELS]
    if not any(keys for _, keys in panels):
        return False
    fig = _figure(figsize=(11, 7))
    axes = fig.subplots(2, 2)
    for ax, (name, keys) in zip(axes.flat, panels, strict=True):
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("epoch")
        ax.xaxis.get_major_locator().set_params(integer=True)
        for key in keys:
            steps, values = zip(*sorted(history[key]), strict=True)
            ax.plot(steps, values, marker="o", markersize=3, label=key)
        if keys:
            ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return True


def partition_bars(parts: list[dict[str, Any]], path: Path, title: str) -> bool:
    """One bar group per part (nodes, edges, halo, train nodes) in a PNG; False if no parts."""
    if not parts:
        return False
    keys = [k for k in PART_BARS if any(k in row for row in parts)]
    fig = _figure(figsize=(3.2 * len(keys), 3.2))
    axes = fig.subplots(1, len(keys))
    for ax, key in zip(axes if len(keys) > 1 else [axes], keys, strict=True):
        ax.bar(range(len(parts)), [row.get(key, 0) for row in parts])
        ax.set_xticks(range(len(parts)), [str(row.get("part", i)) for i, row in enumerate(parts)])
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("part")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return True


def sweep_points(
    swept: dict[str, list[tuple[str, float]]],
) -> dict[str, tuple[list[float] | list[str], list[float]]]:
    """Per swept key, its values (numbers where every value is one, else labels) and the
    monitor of each finished job."""
    out: dict[str, tuple[list[float] | list[str], list[float]]] = {}
    for key, points in swept.items():
        raw, ys = [v for v, _ in points], [y for _, y in points]
        try:
            out[key] = ([float(v) for v in raw], ys)
        except ValueError:
            out[key] = (raw, ys)
    return out


def sweep_plot(swept: dict[str, list[tuple[str, float]]], monitor: str, path: Path) -> bool:
    """One panel per swept key: `monitor` against the key's value, one point per finished job
    (`swept`: key -> [(value, monitor)]); False when no job finished with the monitor."""
    points = {k: v for k, v in sweep_points(swept).items() if v[1]}
    if not points:
        return False
    fig = _figure(figsize=(4 * len(points), 3.4))
    axes = fig.subplots(1, len(points))
    for ax, (key, (xs, ys)) in zip(
        axes if len(points) > 1 else [axes], points.items(), strict=True
    ):
        ax.scatter(xs, ys)
        ax.set_xlabel(key, fontsize=9)
        ax.set_ylabel(monitor, fontsize=9)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{monitor} per swept value", fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return True
