"""Datasets: synthetic generators' statistics, the cache, and the real OGB loaders' code path."""

from __future__ import annotations

import gzip
import multiprocessing as mp
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data, HeteroData

from app.config import ConfigError, DatasetConfig
from app.dataset import OgbDataMissingError, dataset_fingerprint, load_dataset
from app.dataset.mag import generate_mag, to_hetero_data
from app.dataset.synthetic import generate_products, to_data

torch.set_num_threads(1)


def products_cfg(tmp_path: Path, **kw) -> DatasetConfig:
    base = {"name": "synthetic_products", "root": str(tmp_path), "num_nodes": 2000}
    return DatasetConfig(**(base | kw))


def edge_set(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    return set(map(tuple, edge_index.t().tolist()))


# ----------------------------------------------------------------------------- products


def test_products_shapes_and_invariants(tmp_path):
    cfg = products_cfg(tmp_path, avg_degree=20.0, num_features=16)
    data = load_dataset(cfg, seed=0)
    n = cfg.num_nodes
    assert isinstance(data, Data) and data.num_nodes == n and data.num_classes == 47
    assert data.x.dtype == torch.float32 and data.x.shape == (n, 16)
    assert data.y.dtype == torch.int64 and data.y.shape == (n,)
    assert int(data.y.min()) >= 0 and int(data.y.max()) < 47
    ei = data.edge_index
    assert ei.dtype == torch.int64 and ei.size(1) == n * 20  # exactly N * avg_degree
    assert bool((ei[0] != ei[1]).all()), "self loops"
    keys = ei[0] * n + ei[1]
    assert keys.unique().numel() == keys.numel(), "duplicate edges"
    assert edge_set(ei) == edge_set(ei.flip(0)), "not symmetric"
    masks = torch.stack([data.train_mask, data.val_mask, data.test_mask])
    assert masks.dtype == torch.bool and bool((masks.sum(0) == 1).all()), "masks overlap/miss"
    assert int(data.train_mask.sum()) == int(n * cfg.train_frac)
    assert torch.bincount(data.y).max().item() / n < 0.1, "a class dominates"
    assert "time" not in data


def test_products_communities_power_law_and_homophily(tmp_path):
    import pymetis

    data = load_dataset(products_cfg(tmp_path, num_nodes=3000), seed=1)
    src, dst = data.edge_index
    deg = torch.bincount(dst, minlength=data.num_nodes).float()
    assert deg.max() > 6 * deg.mean(), "no hubs: degrees not heavy-tailed"
    top = deg.sort(descending=True).values[: data.num_nodes // 100].sum() / deg.sum()
    assert top > 0.04, f"top 1% of nodes hold only {top:.3f} of edges"
    homophily = (data.y[src] == data.y[dst]).float().mean().item()
    assert homophily > 0.5, homophily
    # METIS finds the communities: far fewer cut edges than a random 8-way split (7/8 cut).
    rowptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(src).cumsum(0)])
    _, parts = pymetis.part_graph(8, xadj=rowptr.numpy(), adjncy=dst.numpy())
    parts = torch.tensor(parts)
    cut = (parts[src] != parts[dst]).float().mean().item()
    assert cut < 0.35, f"METIS cuts {cut:.2f} of edges"


def test_products_deterministic_per_seed():
    cfg = DatasetConfig(num_nodes=1500, num_features=8)
    a, b, c = generate_products(cfg, 3), generate_products(cfg, 3), generate_products(cfg, 4)
    for key in ("x", "y", "edge_index", "train_mask", "test_mask"):
        assert torch.equal(a[key], b[key]), key
    assert not torch.equal(a["edge_index"], c["edge_index"])
    assert not torch.equal(a["y"], c["y"])


def test_products_temporal_time_follows_communities(tmp_path):
    data = load_dataset(products_cfg(tmp_path, temporal=True), seed=0)
    assert data.time.dtype == torch.int64 and data.time.shape == (data.num_nodes,)
    src, dst = data.edge_index
    t = data.time.float()
    near = (t[src] - t[dst]).abs().mean()
    perm = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(0))
    anywhere = (t - t[perm]).abs().mean()
    assert near < 0.7 * anywhere, (near, anywhere)


def accuracy_after_training(model, data, epochs: int) -> float:
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        out = model(data.x, data.edge_index)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(1)
    return (pred[data.test_mask] == data.y[data.test_mask]).float().mean().item()


class TwoLayer(torch.nn.Module):
    """2-layer SAGE, or the same MLP (graph ignored) when `graph=False`."""

    def __init__(self, cin: int, hidden: int, cout: int, graph: bool):
        from torch_geometric.nn import SAGEConv

        super().__init__()
        self.graph = graph
        make = SAGEConv if graph else torch.nn.Linear
        self.a, self.b = make(cin, hidden), make(hidden, cout)

    def forward(self, x, edge_index):
        x = self.a(x, edge_index) if self.graph else self.a(x)
        x = F.dropout(F.relu(x), 0.5, self.training)
        return self.b(x, edge_index) if self.graph else self.b(x)


def test_products_sage_beats_mlp_by_10_points(tmp_path):
    cfg = products_cfg(tmp_path, num_nodes=3000, train_frac=0.3, val_frac=0.1)
    data = load_dataset(cfg, seed=0)
    accs = {}
    for graph in (False, True):
        torch.manual_seed(0)
        model = TwoLayer(data.num_features, 32, data.num_classes, graph)
        accs["sage" if graph else "mlp"] = accuracy_after_training(model, data, epochs=100)
    print(f"accuracy: {accs}")
    assert accs["mlp"] < 0.9, accs
    assert accs["sage"] - accs["mlp"] >= 0.10, accs


# ----------------------------------------------------------------------------- cache


def test_cache_round_trip_and_fingerprint(tmp_path):
    cfg = products_cfg(tmp_path, num_nodes=1000)
    first = load_dataset(cfg, seed=0)
    files = list(tmp_path.glob("synthetic_products-*/data.pt"))
    assert [f.parent.name for f in files] == [f"synthetic_products-{dataset_fingerprint(cfg, 0)}"]
    files[0].touch()
    again = load_dataset(cfg, seed=0)  # from the cache
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(first[key], again[key]), key
    assert again.num_classes == first.num_classes
    assert not list(tmp_path.rglob("*.tmp"))
    again.x += 1  # memory-mapped copy-on-write: the cache file must not change
    assert torch.equal(load_dataset(cfg, seed=0).x, first.x)

    fp = dataset_fingerprint(cfg, 0)
    assert fp == dataset_fingerprint(replace(cfg, root="elsewhere"), 0)
    assert fp != dataset_fingerprint(cfg, 1)
    assert fp != dataset_fingerprint(replace(cfg, num_nodes=1001), 0)
    assert fp != dataset_fingerprint(replace(cfg, name="synthetic_mag"), 0)
    ogb = replace(cfg, name="ogbn_products")
    assert dataset_fingerprint(ogb, 0) == dataset_fingerprint(replace(ogb, num_nodes=5), 7)


def _load_edges(cfg: DatasetConfig, queue) -> None:
    queue.put(load_dataset(cfg, seed=5).edge_index.sum().item())


@pytest.mark.dist
def test_cache_concurrent_writers(tmp_path):
    cfg = products_cfg(tmp_path, num_nodes=3000)
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_load_edges, args=(cfg, queue)) for _ in range(3)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert len(set(results)) == 1
    assert len(list(tmp_path.rglob("data.pt"))) == 1 and not list(tmp_path.rglob("*.tmp"))
    assert load_dataset(cfg, seed=5).edge_index.sum().item() == results[0]


def test_bad_names_and_sizes_fail_early(tmp_path):
    with pytest.raises(ConfigError, match="dataset.name='cora'"):
        load_dataset(products_cfg(tmp_path, name="cora"), seed=0)
    with pytest.raises(ConfigError, match="dataset.avg_degree=-1.0"):
        load_dataset(products_cfg(tmp_path, avg_degree=-1.0), seed=0)
    assert not list(tmp_path.iterdir())


def test_tiny_graphs_still_work():
    for n in (1, 2, 9):
        data = to_data(generate_products(DatasetConfig(num_nodes=n), 0))
        assert data.num_nodes == n and int(data.train_mask.sum()) == 1
        check_mag_schema_loose(to_hetero_data(generate_mag(DatasetConfig(num_nodes=n), 0)))


# ----------------------------------------------------------------------------- synthetic mag

MAG_EDGES = {
    ("paper", "cites", "paper"),
    ("author", "writes", "paper"),
    ("author", "affiliated_with", "institution"),
    ("paper", "has_topic", "field_of_study"),
    ("paper", "rev_writes", "author"),
    ("institution", "rev_affiliated_with", "author"),
    ("field_of_study", "rev_has_topic", "paper"),
}


def check_mag_schema(data: HeteroData) -> None:
    assert isinstance(data, HeteroData)
    assert set(data.node_types) == {"paper", "author", "institution", "field_of_study"}
    assert set(data.edge_types) == MAG_EDGES
    for t in data.node_types:
        assert isinstance(data[t].num_nodes, int) and data[t].num_nodes > 0
        assert ("x" in data[t]) == (t == "paper"), f"features only on papers ({t})"
    paper = data["paper"]
    assert paper.x.dtype == torch.float32 and paper.x.size(0) == paper.num_nodes
    assert paper.y.dtype == torch.int64 and paper.y.shape == (paper.num_nodes,)
    masks = torch.stack([paper.train_mask, paper.val_mask, paper.test_mask])
    assert bool((masks.sum(0) <= 1).all()) and masks.any(1).all()
    for src, rel, dst in data.edge_types:
        ei = data[src, rel, dst].edge_index
        assert ei.dtype == torch.int64 and ei.size(0) == 2
        assert int(ei[0].max()) < data[src].num_nodes and int(ei[1].max()) < data[dst].num_nodes
        if rel.startswith("rev_"):
            fwd = data[dst, rel[4:], src].edge_index
            assert torch.equal(ei, fwd.flip(0)), f"{rel} is not the transpose"


def check_mag_schema_loose(data: HeteroData) -> None:
    """Types and relations only (tiny graphs may lack val/test papers or some edges)."""
    assert set(data.edge_types) == MAG_EDGES and data["paper"].num_nodes >= 1


def test_synthetic_mag_schema_and_sizes(tmp_path):
    cfg = DatasetConfig(name="synthetic_mag", root=str(tmp_path), num_nodes=3000, avg_degree=7.0)
    data = load_dataset(cfg, seed=0)
    check_mag_schema(data)
    assert data["paper"].num_nodes == 3000 and data.num_classes == 47
    assert data["author"].num_nodes == round(3000 * 1_134_649 / 736_389)
    assert data["institution"].num_nodes == round(3000 * 8_740 / 736_389)
    assert data["paper", "cites", "paper"].edge_index.size(1) == 3000 * 7
    assert "time" not in data["paper"]
    citing, cited = data["paper", "cites", "paper"].edge_index
    assert bool((citing != cited).all())


def test_synthetic_mag_temporal_citations_point_back_in_time(tmp_path):
    cfg = DatasetConfig(name="synthetic_mag", root=str(tmp_path), num_nodes=1500, temporal=True)
    paper = (data := load_dataset(cfg, seed=0))["paper"]
    assert paper.time.dtype == torch.int64 and 1990 <= int(paper.time.min())
    citing, cited = data["paper", "cites", "paper"].edge_index
    assert bool((paper.time[citing] >= paper.time[cited]).all())


def test_synthetic_mag_deterministic_per_seed():
    cfg = DatasetConfig(name="synthetic_mag", num_nodes=1000, num_features=8)
    a, b, c = (to_hetero_data(generate_mag(cfg, s)) for s in (0, 0, 1))
    for et in a.edge_types:
        assert torch.equal(a[et].edge_index, b[et].edge_index), et
    assert torch.equal(a["paper"].x, b["paper"].x) and torch.equal(a["paper"].y, b["paper"].y)
    assert not torch.equal(a["paper"].y, c["paper"].y)


def mean_over(edge_index: torch.Tensor, values: torch.Tensor, num_dst: int) -> torch.Tensor:
    """Mean of `values[src]` per destination (zeros where there are none)."""
    out = torch.zeros(num_dst, values.size(1)).index_add_(0, edge_index[1], values[edge_index[0]])
    count = torch.bincount(edge_index[1], minlength=num_dst).clamp(min=1)
    return out / count.unsqueeze(1)


def centroid_accuracy(x: torch.Tensor, y: torch.Tensor, train, test, num_classes: int) -> float:
    centroids = torch.zeros(num_classes, x.size(1)).index_add_(0, y[train], x[train])
    centroids /= torch.bincount(y[train], minlength=num_classes).clamp(min=1).unsqueeze(1)
    pred = torch.cdist(x[test], centroids).argmin(1)
    return (pred == y[test]).float().mean().item()


def test_synthetic_mag_neighbour_aggregation_helps(tmp_path):
    cfg = DatasetConfig(name="synthetic_mag", root=str(tmp_path), num_nodes=4000, train_frac=0.5)
    data = load_dataset(cfg, seed=0)
    paper = data["paper"]
    n = paper.num_nodes
    cites = data["paper", "cites", "paper"].edge_index
    both = torch.cat([cites, cites.flip(0)], 1)
    via_cites = mean_over(both, paper.x, n)
    authors = mean_over(
        data["paper", "rev_writes", "author"].edge_index, paper.x, data["author"].num_nodes
    )
    via_authors = mean_over(data["author", "writes", "paper"].edge_index, authors, n)
    args = (paper.y, paper.train_mask, paper.test_mask, data.num_classes)
    alone = centroid_accuracy(paper.x, *args)
    cites_acc = centroid_accuracy(paper.x + 2 * via_cites, *args)
    authors_acc = centroid_accuracy(paper.x + 2 * via_authors, *args)
    print(
        f"centroid accuracy: alone {alone:.3f}, +cites {cites_acc:.3f}, +authors {authors_acc:.3f}"
    )
    assert alone < 0.9
    assert cites_acc > alone + 0.1 and authors_acc > alone + 0.1


# ----------------------------------------------------------------------------- real OGB layout


def write_csv(path: Path, rows, header: list[str] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows, columns=header)
    with gzip.open(path, "wt") as fh:
        frame.to_csv(fh, header=header is not None, index=False)


def write_split(split_dir: Path, n: int) -> dict[str, np.ndarray]:
    idx = np.random.default_rng(0).permutation(n)
    split = {"train": idx[: n // 2], "valid": idx[n // 2 : 3 * n // 4], "test": idx[3 * n // 4 :]}
    for name, ids in split.items():
        write_csv(split_dir / f"{name}.csv.gz", ids.reshape(-1, 1))
    return split


def write_tiny_products(root: Path, n: int = 30) -> dict:
    """ogbn-products in OGB's on-disk layout (what products.zip unpacks to), tiny."""
    rng = np.random.default_rng(0)
    base = root / "ogbn_products"
    (base / "RELEASE_v1.txt").parent.mkdir(parents=True)
    (base / "RELEASE_v1.txt").write_text("tiny\n")
    edges = np.array([(i, (i + 1) % n) for i in range(n)] + [(0, 5), (3, 9)])
    feat = rng.standard_normal((n, 4)).round(3) + 0.5
    label = rng.integers(0, 47, n)
    write_csv(base / "raw/edge.csv.gz", edges)
    write_csv(base / "raw/num-node-list.csv.gz", [[n]])
    write_csv(base / "raw/num-edge-list.csv.gz", [[len(edges)]])
    write_csv(base / "raw/node-feat.csv.gz", feat)
    write_csv(base / "raw/node-label.csv.gz", label.reshape(-1, 1))
    split = write_split(base / "split/sales_ranking", n)
    return {"edges": edges, "feat": feat, "label": label, "split": split}


MAG_COUNTS = {"author": 12, "field_of_study": 5, "institution": 3, "paper": 20}


def write_tiny_mag(root: Path) -> dict:
    """ogbn-mag in OGB's on-disk layout (what mag.zip unpacks to), tiny."""
    rng = np.random.default_rng(1)
    base = root / "ogbn_mag"
    raw = base / "raw"
    raw.mkdir(parents=True)
    (base / "RELEASE_v2.txt").write_text("tiny\n")
    types = sorted(MAG_COUNTS)
    write_csv(raw / "num-node-dict.csv.gz", [[MAG_COUNTS[t] for t in types]], types)
    write_csv(raw / "nodetype-has-label.csv.gz", [[t == "paper" for t in types]], types)
    triplets = [
        ("author", "affiliated_with", "institution"),
        ("author", "writes", "paper"),
        ("paper", "cites", "paper"),
        ("paper", "has_topic", "field_of_study"),
    ]
    write_csv(raw / "triplet-type-list.csv.gz", triplets)
    edges = {}
    for src, rel, dst in triplets:
        e = np.unique(
            np.stack(
                [rng.integers(0, MAG_COUNTS[src], 25), rng.integers(0, MAG_COUNTS[dst], 25)], 1
            ),
            axis=0,
        )
        edges[src, rel, dst] = e
        write_csv(raw / "relations" / f"{src}___{rel}___{dst}" / "edge.csv.gz", e)
        write_csv(raw / "relations" / f"{src}___{rel}___{dst}" / "num-edge-list.csv.gz", [[len(e)]])
    feat = rng.standard_normal((MAG_COUNTS["paper"], 6)).round(3) + 0.5
    year = rng.integers(2010, 2020, MAG_COUNTS["paper"])
    label = rng.integers(0, 349, MAG_COUNTS["paper"])
    write_csv(raw / "node-feat/paper/node-feat.csv.gz", feat)
    write_csv(raw / "node-feat/paper/node_year.csv.gz", year.reshape(-1, 1))
    write_csv(raw / "node-label/paper/node-label.csv.gz", label.reshape(-1, 1))
    split_dir = base / "split/time"
    write_csv(split_dir / "nodetype-has-split.csv.gz", [[t == "paper" for t in types]], types)
    split = write_split(split_dir / "paper", MAG_COUNTS["paper"])
    return {"edges": edges, "feat": feat, "year": year, "label": label, "split": split}


def assert_masks(data_or_store, split: dict) -> None:
    for ogb_key, mask in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
        got = getattr(data_or_store, mask).nonzero().view(-1).numpy()
        assert np.array_equal(np.sort(got), np.sort(split[ogb_key])), mask


def drop_converted_cache(cfg: DatasetConfig) -> None:
    """Remove our tensor cache so the next load goes through ogb's processed file."""
    cache = Path(cfg.root) / f"{cfg.name}-{dataset_fingerprint(cfg, 0)}" / "data.pt"
    assert cache.exists()
    cache.unlink()


def assert_no_version_check_started() -> None:
    assert "outdated" not in sys.modules
    assert not [t for t in threading.enumerate() if t.name.endswith("(check)")]


def test_ogbn_products_from_ogb_layout(tmp_path):
    truth = write_tiny_products(tmp_path)
    cfg = DatasetConfig(name="ogbn_products", root=str(tmp_path))
    for attempt in range(3):
        if attempt == 1:  # 1st: ogb parses raw/; 2nd: ogb's processed file; 3rd: our cache
            drop_converted_cache(cfg)
        data = load_dataset(cfg, seed=0)
        assert isinstance(data, Data) and data.num_nodes == 30 and data.num_classes == 47
        assert torch.allclose(data.x, torch.tensor(truth["feat"], dtype=torch.float32))
        assert torch.equal(data.y, torch.tensor(truth["label"]))
        undirected = {tuple(e) for e in truth["edges"].tolist()}
        assert edge_set(data.edge_index) == undirected | {(v, u) for u, v in undirected}
        assert data.edge_index.dtype == torch.int64
        assert_masks(data, truth["split"])
    assert (tmp_path / "ogbn_products/processed/data_processed").exists()
    assert_no_version_check_started()
    with pytest.raises(ValueError, match="temporal"):
        load_dataset(replace(cfg, temporal=True), seed=0)


def test_ogbn_mag_from_ogb_layout(tmp_path):
    truth = write_tiny_mag(tmp_path)
    cfg = DatasetConfig(name="ogbn_mag", root=str(tmp_path), temporal=True)
    for attempt in range(3):
        if attempt == 1:
            drop_converted_cache(cfg)
        data = load_dataset(cfg, seed=0)
        check_mag_schema(data)
        assert data.num_classes == 349
        assert {t: data[t].num_nodes for t in data.node_types} == MAG_COUNTS
        paper = data["paper"]
        assert torch.allclose(paper.x, torch.tensor(truth["feat"], dtype=torch.float32))
        assert torch.equal(paper.y, torch.tensor(truth["label"]))
        assert torch.equal(paper.time, torch.tensor(truth["year"]))
        for et, e in truth["edges"].items():
            assert torch.equal(data[et].edge_index, torch.tensor(e.T)), et
        assert_masks(paper, truth["split"])
    assert_no_version_check_started()


@pytest.mark.parametrize("name", ["ogbn_products", "ogbn_mag"])
def test_ogb_missing_files_clear_error(tmp_path, name):
    cfg = DatasetConfig(name=name, root=str(tmp_path))
    with pytest.raises(OgbDataMissingError, match="nothing is downloaded at run time") as err:
        load_dataset(cfg, seed=0)
    assert isinstance(err.value, FileNotFoundError)
    zip_name = name.removeprefix("ogbn_")
    assert str(err.value).startswith(f"{tmp_path / name} does not exist (ogbn-{zip_name} needs ")
    assert f"Download http://snap.stanford.edu/ogb/data/nodeproppred/{zip_name}.zip, " in str(
        err.value
    )
    assert f"rename {zip_name}/ to {name}/" in str(err.value)
    assert str(err.value).endswith(f"or use dataset=synthetic_{zip_name}")
    assert not (tmp_path / name).exists(), "nothing is created before the check"


def test_ogb_missing_raw_file_named(tmp_path):
    write_tiny_products(tmp_path)
    (tmp_path / "ogbn_products/raw/node-label.csv.gz").unlink()
    (tmp_path / "ogbn_products/split/sales_ranking/test.csv.gz").unlink()
    with pytest.raises(OgbDataMissingError) as err:
        load_dataset(DatasetConfig(name="ogbn_products", root=str(tmp_path)), seed=0)
    assert str(err.value).startswith(
        f"{tmp_path / 'ogbn_products'}: 2 of the 9 files ogbn-products needs are missing: "
        "split/sales_ranking/test.csv.gz, raw/node-label.csv.gz; "
    )
