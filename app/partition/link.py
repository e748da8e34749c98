"""The link job's partition: the message graph of `app.dataset.link_split`, partitioned.

A distributed link job partitions the message graph (`ensure_link_partition`, called by the
launcher) and stores the held-out edges in
`<root>/link_split.pt`, in the partition's node ids (a relabelled partition's new ids), with
its checksum beside it (recomputed when it does not match, refused by a trainer). The
partition's dataset fingerprint carries the split
(`<dataset fp>-link<version>-s<seed>`) and its folder ends in `-link`, so it never clashes with
the node-classification partition of the same dataset.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import Tensor
from torch_geometric.data import HeteroData

from app.dataset.link_split import HETERO_LINK_TYPE, SPLIT_VERSION, EdgeType, link_split
from app.partition.reader import PartitionError, checksum_problem, save_checked
from app.partition.spec import PartitionSpec

log = logging.getLogger("distgnn")

LINK_SPLIT_FILE = "link_split.pt"


def link_dataset_fingerprint(spec: PartitionSpec) -> str:
    """The dataset fingerprint of the training-edge graph: dataset fingerprint + split seed."""
    from app.dataset import dataset_fingerprint

    return f"{dataset_fingerprint(spec.dataset, spec.seed)}-link{SPLIT_VERSION}-s{spec.seed}"


def link_partition_root(spec: PartitionSpec) -> tuple[Path, str, str]:
    """(folder, partition fingerprint, dataset fingerprint) of the link job's partition."""
    from app.partition.task import config_fingerprint, partition_root

    dataset_fp = link_dataset_fingerprint(spec)
    fp = config_fingerprint(spec, dataset_fp)
    root = partition_root(spec, fp)
    return (root if spec.partition.root else root.with_name(root.name + "-link")), fp, dataset_fp


def ensure_link_partition(spec: PartitionSpec) -> Path:
    """Partition of the message graph plus `link_split.pt` (val / test edges, in the partition's
    node ids); reused if present."""
    from app.partition.task import write_partition
    from app.partition.writer import find_existing

    root, fp, dataset_fp = link_partition_root(spec)
    existing = find_existing(root, fp, spec.partition.overwrite)
    split_file = root / LINK_SPLIT_FILE
    problem = checksum_problem(split_file)
    if existing is not None and not problem:
        log.info("reusing link partition %s", root)
        return root
    if existing is not None and split_file.exists():
        log.warning("%s: %s; computing it again", split_file, problem)
    from app.dataset import load_dataset

    graph, splits = link_split(load_dataset(spec.dataset, spec.seed), spec.seed)
    if existing is None:
        write_partition(spec, graph, root, dataset_fp)
    edge_type = HETERO_LINK_TYPE if isinstance(graph, HeteroData) else None
    held_out = {k: partition_ids(root, splits[k], edge_type).contiguous() for k in ("val", "test")}
    save_checked(held_out, root / LINK_SPLIT_FILE)
    return root


def partition_ids(root: Path, edges: Tensor, edge_type: EdgeType | None) -> Tensor:
    """`edges` [2, E] (original node ids; of `edge_type` on a heterogeneous graph) in the node ids
    of the partition at `root`: a relabelled partition numbered every node anew (`new_id`)."""
    from app.partition.reader import load_maps, read_meta

    meta = read_meta(root)
    if not meta.get("relabel"):
        return edges
    new_id = load_maps(root, meta, "new_id")
    new_src, new_dst = (
        (new_id[edge_type[0]], new_id[edge_type[-1]]) if meta["is_hetero"] else (new_id, new_id)
    )
    return torch.stack([new_src[edges[0]], new_dst[edges[1]]])


def load_held_out(root: str | Path) -> dict[str, Tensor]:
    """The val / test positives `ensure_link_partition` stored beside the partition, once they
    match the checksum written with them (`PartitionError` naming the file if not)."""
    from app.partition.reader import torch_load

    path = Path(root) / LINK_SPLIT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: partition {root} was not made for links")
    problem = checksum_problem(path)
    if problem:
        raise PartitionError(f"{path}: {problem}; run the job again to compute it anew")
    return torch_load(path)
