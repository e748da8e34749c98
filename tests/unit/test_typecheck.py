"""`make typecheck`'s rule: new mypy errors fail, fixed ones leave the baseline (it only
shrinks), and the engine's seams have none at all."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import tomllib

from tools.typecheck import BASELINE, compare, normalise, normalise_baseline

ROOT = Path(__file__).resolve().parents[2]

OUT = """app/a.py:3: error: Returning Any from function declared to return "int"  [no-any-return]
app/a.py:9: error: Returning Any from function declared to return "int"  [no-any-return]
app/b.py:1:5: error: Name "x" is not defined  [name-defined]
app/b.py:2: note: See https://mypy.readthedocs.io
"""


def test_errors_are_counted_without_line_numbers():
    found = normalise(OUT)
    assert found == Counter(
        {
            'app/a.py: error: Returning Any from function declared to return "int"  [no-any-return]': 2,
            'app/b.py: error: Name "x" is not defined  [name-defined]': 1,
        }
    )


def test_a_new_error_fails_and_a_fixed_one_must_leave_the_baseline():
    found = normalise(OUT)
    baseline = found.copy()
    assert compare(found, baseline) == ([], [])
    fewer = normalise(OUT.replace("app/a.py:9", "app/a.py:9: note"))  # one of the two fixed
    new, fixed = compare(fewer, baseline)
    assert new == [] and fixed == [next(iter(found))]
    new, fixed = compare(found + normalise("app/c.py:1: error: boom  [misc]\n"), baseline)
    assert new == ["app/c.py: error: boom  [misc]"] and fixed == []


def test_the_strict_seams_are_not_in_the_baseline():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    strict = next(o for o in config["overrides"] if o.get("disallow_untyped_defs"))
    modules = set(strict["module"])
    assert {"app.distributed.engine", "app.loader.protocol", "app.placement"} <= modules
    paths = {m.replace(".", "/") + ".py" for m in modules}
    listed = {e.split(":")[0] for e in normalise_baseline(BASELINE.read_text())}
    assert listed and not listed & paths
