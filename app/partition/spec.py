"""`PartitionSpec`: the part of a job's config that determines its partition and its folder.

Partitioning reads two sections (`dataset`, `partition`), the seed and the output dir, and
whether the job trains links (their partition is of the message graph, in a folder of its
own). The launcher and `task=partition` build the spec once from the `Config`; the partition
functions take the spec, so what can change a partition's fingerprint is this value and
nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.config import Config, DatasetConfig, PartitionConfig


@dataclass(frozen=True)
class PartitionSpec:
    """What a partition is made of and where it lives."""

    dataset: DatasetConfig
    partition: PartitionConfig
    seed: int
    output_dir: str
    # a link-prediction job: the partition of its message graph (`app.partition.link`)
    link: bool = False

    @classmethod
    def from_config(cls, cfg: Config) -> PartitionSpec:
        link = cfg.task != "partition" and cfg.train.objective == "link"  # train or eval
        return cls(cfg.dataset, cfg.partition, cfg.seed, cfg.output_dir, link)
