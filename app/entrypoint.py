"""`module:attr.path` strings: how a table names code it must not import.

The launch plan names each process role's main this way (so `app.launch` imports nothing
above it), and the model and objective registries name their builders this way (so
`app.config` validates a name against the table without importing torch or the models).
Packages whose exports must not load with any one submodule name them in a table too
(`lazy_exports`).
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
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


def lazy_exports(
    package: str, exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's `__getattr__` and `__dir__` (PEP 562) for `exports` ({name: module}): a name
    is imported from its module when first asked for, then kept in the package. So importing
    one submodule (which runs the package's `__init__`) does not import every export's module:
    a sampler process must not pay, in memory, for the loaders and PyG's surface (issue 38)."""

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return getattr_, dir_
