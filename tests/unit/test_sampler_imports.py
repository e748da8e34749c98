"""What a sampler process imports: the module-level import closure of its entry (issue 38).

A sampler process pays, in memory, for every module its entry imports, whether it uses it or
not: it must not import Hydra, MLflow or the model code. The closure is read from the sources
(`ast`), so this stays in-process: module-level imports (inside `try` / `if` too, but not under
`if TYPE_CHECKING:`) of every app module reached, with each package's `__init__` (importing
`a.b.c` runs `a/__init__` and `a/b/__init__`). Function-local imports are left out: they run
only when their function does. Third-party packages are recorded by their top-level name.

PyG is not imported: the sampler loads the PyG-free store cores (their PyG faces are in
`app.distributed.pyg`) and sends plain records (`app.sampler.output`), from which the trainer
builds `Data`. `PYG_LEFT` (the closure's modules that import it) was emptied, and can only
shrink: a new importer fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# `app.launch.worker` runs `app.launch.plan.ROLE_MAINS["sampler"]` after loading the config.
SAMPLER_ENTRY = ("app.launch.worker", "app.config", "app.distributed.workers")
FORBIDDEN = ("hydra", "mlflow", "app.train", "app.task.local", "app.tracking.mlflow")
MODEL_ALLOWED = {"app.model", "app.model.registry"}  # names of builders, no model code
PYG_LEFT: set[str] = set()


def _path(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(tree: ast.Module) -> list[str]:
    """Modules named by the import statements that run when the module is loaded."""
    names: list[str] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            # `from pkg import mod` imports the submodule when there is one
            names.extend(
                f"{node.module}.{a.name}" for a in node.names if _path(f"{node.module}.{a.name}")
            )
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            todo.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            todo.extend(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                todo.extend(handler.body)
    return names


def import_closure(entries: tuple[str, ...]) -> set[str]:
    """App modules reached from `entries` at load time, plus third-party top-level names."""
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        if parts[0] != "app":
            seen.add(parts[0])
            continue
        for i in range(1, len(parts) + 1):  # the packages above it load first
            module = ".".join(parts[:i])
            path = _path(module)
            if module in seen or path is None:
                continue
            seen.add(module)
            todo.extend(_top_level_imports(ast.parse(path.read_text(), filename=str(path))))
    return seen


def _importers_of(package: str, closure: set[str]) -> set[str]:
    out = set()
    for module in closure:
        path = _path(module)
        if path is None:
            continue
        names = _top_level_imports(ast.parse(path.read_text(), filename=str(path)))
        if any(n == package or n.startswith(package + ".") for n in names):
            out.add(module)
    return out


def test_the_sampler_imports_no_hydra_mlflow_or_model_code():
    closure = import_closure(SAMPLER_ENTRY)
    bad = sorted(m for m in closure if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
    models = sorted(m for m in closure if m.startswith("app.model") and m not in MODEL_ALLOWED)
    assert bad + models == []
    assert {"torch", "numba", "app.distributed.server", "app.partition.reader"} - closure == set()


def test_the_pyg_importers_of_the_sampler_only_shrink():
    """Each module here that imports torch_geometric keeps PyG in every sampler process."""
    closure = import_closure(SAMPLER_ENTRY)
    assert _importers_of("torch_geometric", closure) <= PYG_LEFT
    assert PYG_LEFT or "torch_geometric" not in closure


def test_package_exports_load_on_first_use():
    """`app.distributed`, `app.sampler`, `app.loader`: a submodule alone does not import the
    package's other exports (`lazy_exports`)."""
    closure = import_closure(("app.sampler.kernel", "app.loader.batch", "app.distributed.rpc"))
    assert {
        "app.sampler.neighbor",
        "app.loader.node_loader",
        "app.distributed.pyg",
    } & closure == set()


def test_the_closure_follows_packages_and_skips_type_checking(tmp_path):
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import hydra\n"
        "try:\n    import numba\nexcept ImportError:\n    pass\n"
        "def f():\n    import mlflow\n"
    )
    assert sorted(_top_level_imports(tree)) == ["numba", "typing"]
    closure = import_closure(("app.distributed.workers",))
    assert {"app", "app.distributed", "app.distributed.rpc"} <= closure
