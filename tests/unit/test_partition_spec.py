"""The partition folder names of the shipped experiments, pinned.

A partition's fingerprint names its folder: a refactor that changes it (a field read from
another section, a parameter's order, a default) makes every user's existing partition
unreachable and forces a repartition. These values were computed before `PartitionSpec`
replaced the whole `Config` in `app.partition.task` and must not move.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.launch.precheck import expected_partition
from app.partition.link import link_partition_root
from app.partition.spec import PartitionSpec
from app.partition.task import config_fingerprint, partition_root

PINNED = [
    ("smoke", (), "synthetic_products-580dc52b4956a121-metis-p1"),
    ("smoke", ("partition=stream",), "synthetic_products-316a63a15174fe42-stream-p1"),
    ("products_homo", (), "synthetic_products-807552dde0d6c919-metis-p2-relabel-locality"),
    (
        "products_homo",
        ("partition=stream",),
        "synthetic_products-3a28afcc36be832b-stream-p2-relabel-locality",
    ),
    ("products_temporal", (), "synthetic_products-c0ac9021bf1528cb-metis-p2"),
    ("mag_hetero", (), "synthetic_mag-6f20fc28e454bd27-metis-p2"),
]
PINNED_LINK = [
    ("products_link", "synthetic_products-7db908880ef4d2a4-metis-p2-relabel-locality-link"),
    ("mag_link", "synthetic_mag-34fc947a5e7451bf-metis-p1-link"),
]


@pytest.mark.parametrize("experiment,overrides,name", PINNED)
def test_partition_folder_of_each_experiment_is_pinned(compose, experiment, overrides, name):
    spec = PartitionSpec.from_config(compose(f"+experiment={experiment}", *overrides))
    fingerprint = name.split("-")[1]
    assert config_fingerprint(spec) == fingerprint
    assert partition_root(spec) == Path("outputs/partitions") / name
    assert expected_partition(spec) == (Path("outputs/partitions") / name, fingerprint)


@pytest.mark.parametrize("experiment,name", PINNED_LINK)
def test_link_partition_folder_is_pinned(compose, experiment, name):
    spec = PartitionSpec.from_config(compose(f"+experiment={experiment}"))
    assert spec.link, f"{experiment} trains links: its partition is the message graph's"
    root, fingerprint, _ = link_partition_root(spec)
    assert root == Path("outputs/partitions") / name and fingerprint == name.split("-")[1]
    assert expected_partition(spec) == (root, fingerprint)


def test_spec_holds_the_config_sections_it_was_built_from(compose):
    cfg = compose("+experiment=smoke", "seed=7", "output_dir=/x")
    spec = PartitionSpec.from_config(cfg)
    fields = (spec.dataset, spec.partition, spec.seed, spec.output_dir, spec.link)
    assert fields == (cfg.dataset, cfg.partition, 7, "/x", False)
    with pytest.raises(AttributeError):
        spec.seed = 8  # type: ignore[misc]
