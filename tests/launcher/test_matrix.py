"""Every everyday combination finishes: models × hidden sizes that narrow and widen the input
features × `train.eval_mode` × 1 and 2 nodes, 3 epochs each (so every job evaluates more than
once, with its kept evaluation buffers). The 2-job sweep over hidden sizes (2 nodes, 3
epochs) is `test_e2e.test_multirun_nests_jobs_under_one_parent`.

Issue 28 #3: a plain sweep over hidden sizes crashed at its second evaluation (a layer-wise
table name used twice), a path no test had taken past one evaluation. `COVERING` is 4 jobs
(every model once, every pair of values of hidden size, eval mode and node count met): `make
test` runs its two 2-node jobs (both hidden sizes, both eval modes; one node is `test_cli`'s
job), `make test-long` the other two, the rest of the pairwise set (8 jobs: any value of any
factor meets every value of every other factor at least once,
`test_the_pairwise_set_covers_every_pair`) and the full product (32 jobs). The smoke graph:
2,000 nodes, 16 features, 8 classes.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch

from tests.helpers.jobs import run_app

pytestmark = pytest.mark.dist

MODELS = ("sage", "gcn", "gat", "mlp")
HIDDEN = (8, 64)  # narrower / wider than the smoke graph's 16 input features
EVAL_MODES = ("layerwise", "sampled")
NODES = (1, 2)
# Each model takes one binary triple (hidden, eval mode, nodes) and its complement: the 8
# triples are all of {0,1}^3, so every pair of the three binary factors occurs, and every
# model meets both values of each.
_TRIPLES = ((0, 0, 0), (1, 1, 1), (0, 1, 1), (1, 0, 0), (1, 0, 1), (0, 1, 0), (1, 1, 0), (0, 0, 1))
PAIRWISE = [
    (MODELS[i // 2], HIDDEN[h], EVAL_MODES[e], NODES[n]) for i, (h, e, n) in enumerate(_TRIPLES)
]
# each model's first triple: the 4 rows of {0,1}^3 with an even sum meet every pair of values
COVERING = PAIRWISE[0::2]
FULL = list(itertools.product(MODELS, HIDDEN, EVAL_MODES, NODES))
SMOKE = ("+experiment=smoke", "train.epochs=3", "loader.batch_size=64")


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """Output dir of the module's jobs: the dataset and each partition are made once."""
    return tmp_path_factory.mktemp("matrix")


def _job(shared: Path, tmp: Path, model: str, hidden: int, mode: str, nodes: int) -> None:
    job = tmp / "run"
    proc = run_app(
        *SMOKE, f"output_dir={shared}", f"dataset.root={shared}/data", "mlflow.enabled=false",
        f"model={model}", f"model.hidden_channels={hidden}", f"train.eval_mode={mode}",
        f"cluster.num_nodes={nodes}", f"partition.num_parts={nodes}", f"hydra.run.dir={job}",
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    # the last epoch's checkpoint (both modes write it; only a distributed job result.json)
    last = torch.load(job / "checkpoints" / "last.pt", weights_only=True)
    assert last["epoch"] == 2 and "position" not in last, "the third epoch did not finish"
    metrics = last["metrics"]
    assert 0.0 <= metrics["test_acc"] <= 1.0 and math.isfinite(metrics["loss"])


def test_the_pairwise_set_covers_every_pair():
    factors = (MODELS, HIDDEN, EVAL_MODES, NODES)
    for a, b in itertools.combinations(range(len(factors)), 2):
        seen = {(row[a], row[b]) for row in PAIRWISE}
        assert seen == set(itertools.product(factors[a], factors[b])), (a, b)
    assert len(set(PAIRWISE)) == 8 and set(PAIRWISE) <= set(FULL)
    for a, b in itertools.combinations(range(1, len(factors)), 2):
        seen = {(row[a], row[b]) for row in COVERING}
        assert seen == set(itertools.product(factors[a], factors[b])), (a, b)
    assert sorted(row[0] for row in COVERING) == sorted(MODELS)


@pytest.mark.parametrize(
    "model,hidden,mode,nodes",
    # make test: the 2-node rows (both hidden sizes, both eval modes); 1 node: make test-long
    [pytest.param(*row, marks=pytest.mark.long) if row[3] == 1 else row for row in COVERING],
)
def test_covering_combination_finishes(shared, tmp_path, model, hidden, mode, nodes):
    _job(shared, tmp_path, model, hidden, mode, nodes)


@pytest.mark.long
@pytest.mark.parametrize(
    "model,hidden,mode,nodes", [row for row in PAIRWISE if row not in COVERING]
)
def test_pairwise_combination_finishes(shared, tmp_path, model, hidden, mode, nodes):
    _job(shared, tmp_path, model, hidden, mode, nodes)


@pytest.mark.long
@pytest.mark.parametrize("model,hidden,mode,nodes", [row for row in FULL if row not in PAIRWISE])
def test_every_other_combination_finishes(shared, tmp_path, model, hidden, mode, nodes):
    _job(shared, tmp_path, model, hidden, mode, nodes)
