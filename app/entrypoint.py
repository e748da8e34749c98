"""`module:attr.path` strings: how a table names code it must not import.

The launch plan names each process role's main this way (so `app.launch` imports nothing
above it), and the model and objective registries name their builders this way (so
`app.config` validates a name against the table without importing torch or the models).
Packages whose exports must not load with any one submodule name them in a table too
(`lazy_exports`), read from the package's own `if TYPE_CHECKING:` imports
(`type_checking_exports`), so one list serves mypy, IDEs and the runtime.
"""

from __future__ import annotations

import ast
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


def type_checking_exports(path: str) -> dict[str, str]:
    """{name: module} of the `from module import name as name` lines in the `if TYPE_CHECKING:`
    block of the source at `path` (a package's `__init__`, passing its `__file__`): the block
    mypy and IDEs read is the table `lazy_exports` loads from, so the names are listed once.
    The `as name` marks a re-export for mypy; anything else in the block is refused, naming
    its line, rather than silently left unexported."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    blocks = [
        node.body
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    ]
    if len(blocks) != 1:
        raise ValueError(f"{path}: {len(blocks)} `if TYPE_CHECKING:` blocks; write one, of exports")
    exports: dict[str, str] = {}
    for stmt in blocks[0]:
        if (
            not isinstance(stmt, ast.ImportFrom)
            or not stmt.module
            or stmt.level
            or any(alias.asname != alias.name for alias in stmt.names)
        ):
            raise ValueError(
                f"{path}:{stmt.lineno}: the `if TYPE_CHECKING:` block lists the exports; write "
                "each as `from package.module import name as name`"
            )
        exports.update(dict.fromkeys((alias.name for alias in stmt.names), stmt.module))
    return exports


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
