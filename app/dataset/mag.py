"""`synthetic_mag`: an ogbn-mag-shaped heterogeneous graph generated from a seed.

Papers follow the `synthetic_products` recipe (communities, power-law weights, noisy community
labels, noisy class-mean features). `cfg.num_nodes` is the paper count and `cfg.avg_degree` the
citations per paper; the other types and relations keep ogbn-mag's ratios (736k papers, 1.13M
authors, 8.7k institutions, 59.9k fields; 9.7 authors and 10.2 fields per paper, 0.92
affiliations per author). Authors, institutions and fields get a home community and link mostly
inside it, so aggregating over cites / authors / fields carries label signal even though only
papers have features. Citations point from the newer paper to the older one (by year).

Edge types are ogbn-mag's four, plus the reverses PyG's `ToUndirected` would add for the three
bipartite ones (`rev_writes`, ...); `cites` stays directed, as in ogbn-mag.
"""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import HeteroData

from app.config import DatasetConfig
from app.dataset.synthetic import (
    WeightedPicker,
    assign_communities,
    class_features,
    community_labels,
    community_times,
    noisy_labels,
    num_communities,
    power_law_weights,
    rngs,
    sorted_unique,
    split_masks,
    undirected_keys,
)

NODE_TYPES = ("paper", "author", "institution", "field_of_study")
OGBN_MAG_NODES = {
    "paper": 736_389,
    "author": 1_134_649,
    "institution": 8_740,
    "field_of_study": 59_965,
}
EDGE_TYPES = (
    ("paper", "cites", "paper"),
    ("author", "writes", "paper"),
    ("author", "affiliated_with", "institution"),
    ("paper", "has_topic", "field_of_study"),
)
REVERSED = {"writes", "affiliated_with", "has_topic"}  # relations that get a rev_ edge type
AUTHORS_PER_PAPER = 7_145_660 / 736_389
FIELDS_PER_PAPER = 7_505_078 / 736_389
AFFILIATIONS_PER_AUTHOR = 1_043_998 / 1_134_649
HOME = {"writes": 0.85, "affiliated_with": 0.6, "has_topic": 0.8}  # share inside the community
FIRST_YEAR, YEARS = 1990, 30  # paper years lie in [FIRST_YEAR, FIRST_YEAR + YEARS)


def edge_key(edge_type: tuple[str, str, str]) -> str:
    """Flat string name of an edge type, for plain (weights_only-safe) dict keys."""
    return "__".join(edge_type)


def type_sizes(num_papers: int) -> dict[str, int]:
    """Node count per type: papers as given, the rest scaled like ogbn-mag (at least 1)."""
    scale = num_papers / OGBN_MAG_NODES["paper"]
    return {t: max(1, round(n * scale)) for t, n in OGBN_MAG_NODES.items()} | {"paper": num_papers}


def unique_pairs(src: np.ndarray, dst: np.ndarray, num_dst: int) -> np.ndarray:
    """int64 [2, E]: the distinct (src, dst) pairs, sorted by source."""
    keys = sorted_unique(src.astype(np.int64) * num_dst + dst)
    return np.stack([keys // num_dst, keys % num_dst])


def linked(
    rng: np.random.Generator, home_comm: np.ndarray, picker: WeightedPicker, home: float
) -> np.ndarray:
    """One partner per entry: inside `home_comm` with probability `home`, else anywhere."""
    partner = picker.within(rng, home_comm.astype(np.int64))
    away = rng.random(len(partner)) >= home
    partner[away] = picker.anywhere(rng, int(away.sum()))
    return partner


def citations(
    rng: np.random.Generator, year: np.ndarray, papers: WeightedPicker, comm, comm_label, n: int
) -> np.ndarray:
    """Distinct paper pairs of the products recipe, each pointing from newer to older."""
    num_papers = len(year)
    keys = undirected_keys(rng, num_papers, n, papers, comm, comm_label)
    a, b = keys // num_papers, keys % num_papers  # a < b
    newer_b = (year[b] > year[a]) | ((year[b] == year[a]) & (rng.random(len(keys)) < 0.5))
    src, dst = np.where(newer_b, b, a), np.where(newer_b, a, b)
    return unique_pairs(src, dst, num_papers)


def generate_mag(cfg: DatasetConfig, seed: int) -> dict:
    """Plain-tensor dict {kind, num_classes, nodes: {type: {...}}, edges: {key: [2, E]}}."""
    sizes, k = type_sizes(cfg.num_nodes), num_communities(cfg)
    g_struct, g_cites, g_links, g_labels, g_feat, g_split, g_time = rngs(seed, 7)
    comm = assign_communities(g_struct, sizes["paper"], k)
    comm_label = community_labels(g_struct, k, cfg.num_classes)
    # Other types take a home community: authors and fields in proportion to paper counts.
    home = {t: comm[g_struct.integers(0, sizes["paper"], sizes[t])] for t in NODE_TYPES[1:]}
    home["institution"] = g_struct.integers(0, k, sizes["institution"]).astype(np.int32)
    home["paper"] = comm
    pick = {
        t: WeightedPicker.build(home[t], power_law_weights(g_struct, sizes[t]), k) for t in home
    }
    year = community_times(g_time, comm, YEARS) + FIRST_YEAR

    n_cites = min(
        round(sizes["paper"] * cfg.avg_degree), sizes["paper"] * (sizes["paper"] - 1) // 2
    )
    written = pick["paper"].anywhere(g_links, round(sizes["paper"] * AUTHORS_PER_PAPER))
    authors = linked(g_links, comm[written], pick["author"], HOME["writes"])
    members = g_links.integers(0, sizes["author"], round(sizes["author"] * AFFILIATIONS_PER_AUTHOR))
    insts = linked(g_links, home["author"][members], pick["institution"], HOME["affiliated_with"])
    topical = g_links.integers(0, sizes["paper"], round(sizes["paper"] * FIELDS_PER_PAPER))
    fields = linked(g_links, comm[topical], pick["field_of_study"], HOME["has_topic"])
    edges = {
        ("paper", "cites", "paper"): citations(
            g_cites, year, pick["paper"], comm, comm_label, n_cites
        ),
        ("author", "writes", "paper"): unique_pairs(authors, written, sizes["paper"]),
        ("author", "affiliated_with", "institution"): unique_pairs(
            members, insts, sizes["institution"]
        ),
        ("paper", "has_topic", "field_of_study"): unique_pairs(
            topical, fields, sizes["field_of_study"]
        ),
    }

    y = noisy_labels(g_labels, comm_label[comm], cfg.num_classes)
    paper = {
        "x": torch.from_numpy(
            class_features(g_feat, y, cfg.num_classes, cfg.num_features, cfg.feature_dtype)
        ),
        "y": torch.from_numpy(y),
    }
    masks = split_masks(g_split, sizes["paper"], cfg.train_frac, cfg.val_frac, cfg.test_frac)
    paper |= {name: torch.from_numpy(mask) for name, mask in masks.items()}
    if cfg.temporal:
        paper["time"] = torch.from_numpy(year)
    nodes: dict[str, dict] = {t: {"num_nodes": sizes[t]} for t in NODE_TYPES}
    nodes["paper"] |= paper
    return {
        "kind": "hetero",
        "num_classes": cfg.num_classes,
        "nodes": nodes,
        "edges": {edge_key(et): torch.from_numpy(ei) for et, ei in edges.items()},
    }


def to_hetero_data(obj: dict) -> HeteroData:
    """Build `HeteroData` from the plain dict, adding the reverse edge types."""
    data = HeteroData()
    for node_type, attrs in obj["nodes"].items():
        for name, value in attrs.items():
            setattr(data[node_type], name, value)
    for key, edge_index in obj["edges"].items():
        src, rel, dst = key.split("__")
        data[src, rel, dst].edge_index = edge_index
        if rel in REVERSED:
            data[dst, f"rev_{rel}", src].edge_index = edge_index.flip(0)
    data.num_classes = int(obj["num_classes"])
    return data
