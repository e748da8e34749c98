"""`module:attr.path` strings: how a table names code it must not import.

The launch plan names each process role's main this way (so `app.launch` imports nothing
above it), and the model and objective registries name their builders this way (so
`app.config` validates a name against the table without importing torch or the models).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any


@functools.cache
def resolve(entry: str) -> Any:
    """The object `entry` ("pkg.module:Name.attr") names; ValueError naming it if malformed."""
    module, sep, attrs = entry.partition(":")
    if not sep or not module or not attrs:
        raise ValueError(f"entry point {entry!r}: expected 'package.module:name'")
    obj: Any = importlib.import_module(module)
    for attr in attrs.split("."):
        obj = getattr(obj, attr)
    return obj
