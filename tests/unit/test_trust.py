"""Trust (issue 12): partitions verified once, memory refused up front, configs checked early."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch
from torch_geometric.data import Data

from app.config import ConfigError
from app.launch.limits import check_memory, estimate_bytes
from app.partition import reader
from app.partition.reader import VERIFIED_FILE, PartitionError, load_partition, verify_partition
from app.partition.spec import PartitionSpec
from app.partition.writer import partition_graph
from tests.helpers.disk import rot
from tests.helpers.jobs import REPO, run_app


def _graph(n: int = 300, nan: bool = False) -> Data:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    if nan:
        x[7, 3] = float("nan")
    edge_index = torch.randint(0, n, (2, 6 * n), generator=g)
    mask = torch.zeros(n, dtype=torch.bool)
    mask[: n // 2] = True
    y = torch.randint(0, 4, (n,), generator=g)
    return Data(x=x, y=y, edge_index=edge_index, train_mask=mask, val_mask=~mask, test_mask=~mask)


@pytest.fixture(scope="module")
def part_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("trust") / "p"
    partition_graph(_graph(), root, 2, method="random")
    return root


def _copy(root, dst):
    import shutil

    shutil.copytree(root, dst)
    return dst


def test_each_file_is_verified_once_then_rechecked_when_changed(part_root, tmp_path, monkeypatch):
    root = _copy(part_root, tmp_path / "p")
    (root / VERIFIED_FILE).unlink(missing_ok=True)
    calls: list[str] = []
    real = reader.file_checksum
    monkeypatch.setattr(reader, "file_checksum", lambda p: calls.append(p.name) or real(p))
    verify_partition(root, 2)
    files = json.loads((root / VERIFIED_FILE).read_text())["files"]
    assert "part_1/node_feats.pt" in files and "node_map.pt" in files
    first = len(calls)
    calls.clear()
    verify_partition(root, 2)
    assert calls == ["META.json"]  # the launcher's reuse: only META.json's own hash
    calls.clear()
    load_partition(root, 1, 2)  # a loading process hashes what it loads (bit rot: below)
    assert calls == ["META.json", "node_map.pt", *(f"{n}.pt" for n in ("graph", "node_feats",
        "edge_feats", "seeds"))]  # fmt: skip
    assert first > 8
    path = root / "part_1" / "node_feats.pt"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2 : len(raw) // 2 + 64] = b"\xff" * 64
    path.write_bytes(bytes(raw))
    with pytest.raises(PartitionError, match=r"part_1/node_feats.pt: checksum mismatch") as err:
        verify_partition(root, 2)
    assert "\n" not in str(err.value) and "overwrite" not in str(err.value)


def test_bit_rot_behind_the_marker_is_refused_when_a_part_is_loaded(part_root, tmp_path):
    root = _copy(part_root, tmp_path / "p")
    verify_partition(root, 2)
    path = root / "part_0" / "node_feats.pt"
    rot(path)
    verify_partition(root, 2)  # the launcher's cached check: same size and mtime
    load_partition(root, 1, 2)  # the other part is fine
    with pytest.raises(PartitionError, match=r"part_0/node_feats.pt: checksum mismatch") as err:
        load_partition(root, 0, 2)
    assert "\n" not in str(err.value)


def test_non_finite_values_are_refused_even_when_marked_verified(tmp_path):
    """The marker says verified, the checksums match (rewritten consistently): the loading
    process still refuses the NaN it would train on."""
    root = partition_graph(_graph(nan=True), tmp_path / "nan", 2, method="random").root
    owner = _owner(root, 7)
    meta_sum = reader.file_checksum(root / "META.json")
    files = {rel: reader._stat_key(root / rel) for rel in json.loads(
        (root / "META.json").read_text())["checksums"]}  # fmt: skip
    (root / VERIFIED_FILE).write_text(json.dumps({"meta": meta_sum, "files": files}))
    with pytest.raises(PartitionError, match=r"feature 'x' holds 1 non-finite"):
        load_partition(root, owner, 2)


def test_non_finite_features_are_refused_in_one_line(tmp_path):
    root = partition_graph(_graph(nan=True), tmp_path / "nan", 2, method="random").root
    with pytest.raises(PartitionError, match=r"node_feats.pt: feature 'x' holds 1 non-finite"):
        verify_partition(root, 2)
    with pytest.raises(PartitionError, match="non-finite"):
        load_partition(root, 0) if _owner(root, 7) == 0 else load_partition(root, 1)


def _owner(root, node: int) -> int:
    return int(torch.load(root / "node_map.pt", weights_only=True)[node])


def test_meta_byte_flip_names_the_file(part_root, tmp_path):
    root = _copy(part_root, tmp_path / "p")
    raw = bytearray((root / "META.json").read_bytes())
    raw[3] = 0xFF
    (root / "META.json").write_bytes(bytes(raw))
    with pytest.raises(PartitionError, match=r"META.json: not valid JSON") as err:
        verify_partition(root)
    assert "\n" not in str(err.value)


def _spec(compose):
    """`compose`, giving the partition spec the memory check reads."""
    return lambda *overrides: PartitionSpec.from_config(compose(*overrides))


def test_memory_estimate_refuses_huge_graphs_in_one_line(compose):
    spec = _spec(compose)
    huge = spec("+experiment=smoke", "dataset.num_nodes=2000000000")
    with pytest.raises(ConfigError, match=r"needs about \d+\.\d GiB but 8\.0 GiB is available"):
        check_memory(huge, available=8 << 30)
    small = spec("+experiment=smoke")
    check_memory(small, available=8 << 30)
    assert 0 < estimate_bytes(small) < estimate_bytes(huge)
    assert estimate_bytes(spec("+experiment=products_homo")) < 8 << 30  # the main job fits


def test_memory_check_uses_the_streaming_estimate_for_partition_stream(compose):
    """Issue 28 #4: 8M nodes in 8 parts under a 4 GiB budget was refused with the in-memory
    figure (~33.8 GiB); the streaming path's own peak is what the check compares."""
    spec = _spec(compose)
    big = ("dataset.num_nodes=8000000", "partition.num_parts=8", "cluster.num_nodes=8")
    stream = spec("task=partition", *big, "partition=stream", "partition.memory_budget_gb=4")
    metis = spec("task=partition", *big)
    assert estimate_bytes(metis) > 30 << 30
    assert estimate_bytes(stream) <= 4 << 30
    check_memory(stream, available=6 << 30)
    with pytest.raises(ConfigError, match=r"partition.method=metis\): .* needs about 3\d\.\d GiB"):
        check_memory(metis, available=6 << 30)
    relabelled = spec(
        "task=partition", *big, "partition=stream", "partition.relabel=true",
        "partition.order=locality",
    )  # fmt: skip
    assert estimate_bytes(stream) < estimate_bytes(relabelled) <= 5 << 30


def test_dataset_smaller_than_the_cluster_fails_validation(compose):
    with pytest.raises(ConfigError, match=r"dataset.num_nodes=1: gives 1 training nodes for 2"):
        compose("+experiment=smoke", "dataset.num_nodes=1", "cluster.num_nodes=2")


def test_remote_master_needs_allow_remote(compose):
    with pytest.raises(ConfigError, match=r"cluster.master_addr='10.1.2.3' is not a loopback"):
        compose("cluster.master_addr=10.1.2.3")
    assert compose("cluster.master_addr=10.1.2.3", "cluster.allow_remote=true").cluster.allow_remote
    assert compose("cluster.master_addr=localhost").cluster.master_addr == "localhost"


@pytest.mark.dist
@pytest.mark.parametrize(
    "bad,match",
    [
        ("train.epochs=-3", "train.epochs=-3: must be > 0"),
        ("sampler.num_neighbors=[5]", "has 1 hops but model.num_layers=2"),
        ("model.name=foo", "model.name='foo': expected one of"),
    ],
)
def test_cfg_job_validates_and_fails_nonzero(bad, match):
    proc = run_app("+experiment=smoke", bad, "--cfg", "job", timeout=60)
    assert proc.returncode == 2, proc.stdout[-500:]
    assert proc.stderr.startswith("config error: ") and match in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    good = run_app("+experiment=smoke", "--cfg", "job", timeout=60)
    assert good.returncode == 0 and "num_nodes: 2000" in good.stdout


@pytest.mark.dist
def test_jobs_started_in_the_same_second_get_their_own_dirs(tmp_path):
    """Two real `python -m app` jobs with one output_dir, started together: two job dirs."""
    args = [
        sys.executable,
        "-m",
        "app",
        "task=partition",
        "+experiment=smoke",
        "dataset.num_nodes=300",
        f"output_dir={tmp_path}",
        f"dataset.root={tmp_path / 'data'}",
        "mlflow.enabled=false",
    ]
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    procs = [subprocess.Popen(args, cwd=REPO, **pipes) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-2000:]
    dirs = sorted((tmp_path / "runs").iterdir())
    assert len(dirs) == 2, dirs
    for d in dirs:
        assert (d / ".hydra" / "config.yaml").is_file()
        assert len(d.name.rsplit("-", 1)[1]) == 6  # <timestamp>-<6 hex>
        assert d.name.startswith(time.strftime("%Y-%m-%d"))
