"""Layering: models are pure modules and the launcher does not reach into training.

Parses every module's imports (top-level and function-local) with `ast`, so a lazy import
inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"

RULES = {
    "model": ("app.train", "app.loader", "app.distributed", "app.launch", "app.task"),
    "launch": ("app.train",),
    "task": ("app.train", "app.launch"),
}


def imported_modules(path: Path) -> set[str]:
    """Every module name an `import` / `from ... import` statement in `path` names."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    out = []
    for path in sorted((APP / package).rglob("*.py")):
        for name in sorted(imported_modules(path)):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                out.append(f"{path.relative_to(APP.parent)} imports {name}")
    return out


@pytest.mark.parametrize("package", sorted(RULES))
def test_package_imports_respect_layering(package):
    assert _violations(package, RULES[package]) == []


def test_the_checker_sees_function_local_imports(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("def f():\n    from app.train.loop import fit\n    import app.launch\n")
    assert {"app.train.loop", "app.train.loop.fit", "app.launch"} <= imported_modules(mod)
