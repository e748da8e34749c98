"""The lazy-export packages list their exports once, in their `if TYPE_CHECKING:` block
(`app.entrypoint.type_checking_exports`): each name there is what the package hands out at
runtime, and a block the reader cannot take as a table is refused at import, naming its line."""

from __future__ import annotations

import importlib

import pytest

import app.distributed
import app.loader
import app.sampler
from app.entrypoint import type_checking_exports


@pytest.mark.parametrize("package", [app.distributed, app.loader, app.sampler])
def test_every_type_checking_import_is_exported_at_runtime(package):
    exports = type_checking_exports(package.__file__)
    assert exports and package.__all__ == sorted(exports)
    for name, module in exports.items():
        assert name in dir(package)
        assert getattr(package, name) is getattr(importlib.import_module(module), name)


def test_reads_the_block_as_a_table(tmp_path):
    path = tmp_path / "pkg.py"
    path.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from a.b import C as C, d as d\n"
        "    from a.e import f as f\n"
        "X = 1\n"
    )
    assert type_checking_exports(str(path)) == {"C": "a.b", "d": "a.b", "f": "a.e"}


@pytest.mark.parametrize(
    "block, line",
    [
        ("    from a.b import C\n", 3),  # no `as C`: mypy would not see it re-exported
        ("    from a.b import C as D\n", 3),
        ("    from a.b import C as C\n    import a.e\n", 4),
        ("    from .b import C as C\n", 3),
    ],
)
def test_a_block_that_is_not_a_table_is_refused_naming_its_line(tmp_path, block, line):
    path = tmp_path / "pkg.py"
    path.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n" + block)
    with pytest.raises(ValueError, match=rf"pkg\.py:{line}: .*import name as name"):
        type_checking_exports(str(path))


def test_a_package_without_the_block_is_refused(tmp_path):
    path = tmp_path / "pkg.py"
    path.write_text("X = 1\n")
    with pytest.raises(ValueError, match="0 `if TYPE_CHECKING:` blocks"):
        type_checking_exports(str(path))
