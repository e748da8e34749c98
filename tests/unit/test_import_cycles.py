"""No import cycle inside `app/`: modules are layered, so each can be read (and loaded) alone.

An edge A -> B is ANY import of app module B written in A: at module level, inside `try` / `if`,
and inside functions and classes too (a function-level import that closes a cycle is still a
cycle: the two modules cannot be understood, tested or moved apart). Only `if TYPE_CHECKING:`
blocks are left out (they never run). `from pkg import name` counts as an import of `pkg.name`
when that is a module, else of `pkg`. A package's `__init__` importing its submodules is not a
cycle (importing `pkg.mod` runs `pkg/__init__` first by design).
"""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"


def _module_name(path: Path) -> str:
    rel = path.relative_to(APP.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in APP.rglob("*.py")}


def _imports(tree: ast.Module) -> list[ast.stmt]:
    """Every import statement in the module, at any depth, except under `if TYPE_CHECKING:`."""
    out, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo += node.orelse
        else:
            todo += ast.iter_child_nodes(node)
    return out


def _edges(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    out = set()
    for node in _imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        for t in targets:
            if t in modules and t != name and not (is_pkg and t.startswith(name + ".")):
                out.add(t)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_in_app():
    modules = _modules()
    graph = {name: _edges(name, path, modules) for name, path in modules.items()}
    assert not _cycles(graph), f"import cycles inside app/: {_cycles(graph)}"


def test_the_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_function_level_imports_are_edges_but_type_checking_ones_are_not():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import app.hidden\n"
        "def f():\n    from app.lazy import thing\n"
        "class C:\n    def g(self):\n        import app.deep\n"
    )
    found = {
        a.name if isinstance(n, ast.Import) else n.module for n in _imports(tree) for a in n.names
    }
    assert found == {"typing", "app.lazy", "app.deep"}
