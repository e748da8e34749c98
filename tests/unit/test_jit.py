"""The kernel cache (`app.jit`): outside the work tree, shared by checkouts, numba's default for
everyone else's kernels, and compilations announced.

Each case runs a fresh interpreter (numba picks a kernel's cache when its module is imported)
with `DISTGNN_CACHE_DIR` in a temporary folder, and calls one small real kernel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.jobs import REPO

CALL_KERNEL = """
import json, logging, sys
import numpy as np
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
from app.jit import watch_compiles
watch_compiles()
from app.model.ops import numba_cpu as k
k._mark(np.array([0], np.int64), np.zeros(1, np.bool_))
print(json.dumps({"hits": sum(k._mark.stats.cache_hits.values()),
                  "misses": sum(k._mark.stats.cache_misses.values())}))
"""


def _run(code: str, cache: Path, cwd: Path) -> tuple[dict, str]:
    env = {**os.environ, "DISTGNN_CACHE_DIR": str(cache), "PYTHONPATH": str(cwd)}
    env.pop("NUMBA_CACHE_LOCATOR_CLASSES", None)
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.dist
def test_kernels_cache_outside_the_checkout_and_a_second_checkout_reuses_them(tmp_path):
    cache = tmp_path / "cache"
    first, said = _run(CALL_KERNEL, cache, REPO)
    assert first["misses"] == 1 and first["hits"] == 0
    assert "compiling kernels (once per machine" in said and "compiled 1 kernels" in said
    entries = list(cache.glob("numba-*/app.model.ops.numba_cpu-*/numba_cpu._mark-*.nbi"))
    assert len(entries) == 1  # keyed by module name + source hash, not by the checkout's path

    other = tmp_path / "checkout2"  # the same sources at another path: a fresh clone
    shutil.copytree(REPO / "app", other / "app", ignore=shutil.ignore_patterns("__pycache__"))
    second, said = _run(CALL_KERNEL, cache, other)
    assert second == {"hits": 1, "misses": 0}
    assert "compiling kernels" not in said
    assert not list((other / "app").rglob("*.nbi"))  # nothing written into the work tree


@pytest.mark.dist
def test_changed_kernel_source_gets_its_own_entry(tmp_path):
    cache, other = tmp_path / "cache", tmp_path / "edited"
    shutil.copytree(REPO / "app", other / "app", ignore=shutil.ignore_patterns("__pycache__"))
    ops = other / "app" / "model" / "ops" / "numba_cpu.py"
    ops.write_text(ops.read_text() + "\n# edited\n")
    _run(CALL_KERNEL, cache, REPO)
    edited, _ = _run(CALL_KERNEL, cache, other)
    assert edited["misses"] == 1  # never the other source's machine code
    assert len(list(cache.glob("numba-*/app.model.ops.numba_cpu-*"))) == 2


@pytest.mark.dist
def test_kernels_outside_the_package_keep_numbas_own_cache(tmp_path):
    (tmp_path / "mine.py").write_text(
        "import numba\n@numba.njit(cache=True)\ndef double(x):\n    return 2 * x\n"
    )
    code = "import app, mine, json; print(json.dumps({'v': mine.double(2)}))"
    out, _ = _run(code, tmp_path / "cache", tmp_path)
    assert out == {"v": 4}
    assert list((tmp_path / "__pycache__").glob("mine.double-*.nbi"))  # numba's in-tree default
    assert not (tmp_path / "cache").exists()


def test_warm_marker_names_sources_and_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTGNN_CACHE_DIR", str(tmp_path))
    from app.jit import warm

    assert not warm.is_warm()
    first = warm.marker()
    monkeypatch.setattr(warm, "WARMED", (*warm.WARMED, "app/jit/__init__.py"))
    assert warm.marker() != first and warm.marker().parent == first.parent
    assert first.parent.is_relative_to(tmp_path)


FORKED_AFTER_PRELOAD = """
import json, os, sys
from app.distributed import LocalGraphStore
before = "numba.np.arraymath" in sys.modules
LocalGraphStore.from_partition(sys.argv[1], 0)  # starts the preload
r, w = os.pipe()
pid = os.fork()  # waits for the preload first
if pid == 0:
    os.write(w, b"1" if "numba.np.arraymath" in sys.modules else b"0")
    os._exit(0)
os.waitpid(pid, 0)
print(json.dumps({"before": before, "child": os.read(r, 1) == b"1"}))
"""


def _tiny_partition(out: Path) -> str:
    """A 2-part partition of a 40-node ring under `out`."""
    import torch
    from torch_geometric.data import Data

    from app.distributed import Partitioner

    ring = torch.arange(40)
    data = Data(x=torch.randn(40, 4), y=torch.zeros(40, dtype=torch.long),
                edge_index=torch.stack([ring, (ring + 1) % 40]))  # fmt: skip
    Partitioner(data, 2, str(out)).generate_partition()
    return str(out)


@pytest.mark.dist
def test_loading_a_partition_preloads_numba_before_any_fork(tmp_path):
    """A process that loads a partition sets numba up in the background; a fork waits for it,
    so a forked sampler starts with numba's registries instead of importing them at its first
    batch."""
    root = _tiny_partition(tmp_path / "parts")  # here: partitioning itself calls kernels
    code = FORKED_AFTER_PRELOAD.replace("sys.argv[1]", repr(root))
    out, _ = _run(code, tmp_path / "cache", REPO)
    assert out == {"before": False, "child": True}
