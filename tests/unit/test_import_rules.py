"""Layering: models are pure modules and the launcher does not reach into training.

Parses every module's imports (top-level and function-local) with `ast`, so a lazy import
inside a function counts as much as one at the top. The entry modules (`app.__main__`, the
`app.run` dispatcher) sit above every room: nothing in app/ imports them, so no room can reach
a higher one through a shim placed there. The launcher reaches each role's main only through
the `module:function` strings of `ROLE_MAINS`, which must resolve.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"

ENTRY = ("app.__main__", "app.run")
RULES = {
    "model": ("app.train", "app.loader", "app.distributed", "app.launch", "app.task", *ENTRY),
    "launch": ("app.train", "app.task", *ENTRY),
    "task": ("app.train", "app.launch", *ENTRY),
    "distributed": ("app.train", "app.task", "app.launch", *ENTRY),
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


# PyG's surface over the engine: imported by `app.distributed` (its exports) and the alias
# modules PyG's own tests import by name (`app.distributed.dist_*`), nothing else in app/.
PYG_LAYER = "app.distributed.pyg"
PYG_IMPORTERS = {
    "distributed/__init__.py",
    "distributed/dist_link_neighbor_loader.py",
    "distributed/dist_loader.py",
    "distributed/dist_neighbor_loader.py",
    "distributed/dist_neighbor_sampler.py",
    "distributed/event_loop.py",
    "distributed/local_feature_store.py",
    "distributed/local_graph_store.py",
    "distributed/utils.py",
}


def test_only_the_pyg_surface_imports_the_pyg_layer():
    out = []
    for path in sorted(APP.rglob("*.py")):
        rel = path.relative_to(APP).as_posix()
        if rel.startswith("distributed/pyg/") or rel in PYG_IMPORTERS:
            continue
        if any(n == PYG_LAYER or n.startswith(PYG_LAYER + ".") for n in imported_modules(path)):
            out.append(rel)
    assert out == []


def test_the_checker_sees_function_local_imports(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("def f():\n    from app.train.loop import fit\n    import app.launch\n")
    assert {"app.train.loop", "app.train.loop.fit", "app.launch"} <= imported_modules(mod)


def test_no_module_imports_the_entry_modules():
    """A shim in `app.run` or `app.__main__` (a lower room importing back up) is refused."""
    out = []
    for path in sorted(APP.rglob("*.py")):
        if path.relative_to(APP).as_posix() in ("__main__.py", "run.py"):
            continue
        for name in sorted(imported_modules(path)):
            if any(name == e or name.startswith(e + ".") for e in ENTRY):
                out.append(f"{path.relative_to(APP.parent)} imports {name}")
    assert out == []


def test_role_mains_name_callables_outside_the_launcher():
    from app.entrypoint import resolve
    from app.launch.plan import ROLE_MAINS
    from app.runtime import ROLES

    assert sorted(ROLE_MAINS) == sorted(ROLES)
    for role, entry in ROLE_MAINS.items():
        assert not entry.startswith("app.launch"), role
        assert callable(resolve(entry)), entry
