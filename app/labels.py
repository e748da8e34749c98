"""Class labels checked against the dataset's declared number of classes, wherever they enter
a job: when a graph is written (chunked generation), partitioned, and loaded for training.

A label is valid when `0 <= y < num_classes`. `UNLABELLED` (-1, PyG users' usual sentinel)
marks a node without a label: allowed on nodes outside the train / val / test splits, whose
labels no loss or metric reads, refused on a node of a split. Any other value would change
the task silently (a model sized by `max(y) + 1`) or fail mid-training with an IndexError,
so it is one line naming the file and the count instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

UNLABELLED = -1


class LabelError(ValueError):
    """Labels outside `[0, num_classes)` (or `UNLABELLED` on a node of a split)."""


def bad_labels(y: Any, num_classes: int, labelled: Any = None) -> np.ndarray:
    """The invalid labels of `y` (array or tensor); `labelled`: bool mask of the nodes in a
    split (their label must not be `UNLABELLED`), or None when not known here."""
    y = np.asarray(y).reshape(-1)
    bad = (y < UNLABELLED) | (y >= num_classes)
    if labelled is not None:
        bad |= (y == UNLABELLED) & np.asarray(labelled, dtype=bool).reshape(-1)
    return y[bad]


def check_labels(y: Any, num_classes: int, where: Any, labelled: Any = None) -> None:
    """Raise `LabelError` naming `where` (a file) and the count of invalid labels in `y`."""
    bad = bad_labels(y, num_classes, labelled)
    if bad.size:
        raise LabelError(
            f"{where}: {bad.size} of {np.asarray(y).size} labels outside [0, {num_classes}) "
            f"(values {int(bad.min())}..{int(bad.max())}; dataset.num_classes={num_classes}; "
            f"{UNLABELLED} marks an unlabelled node, allowed outside train/val/test only): "
            "fix the labels, or set dataset.num_classes to the graph's number of classes"
        )
