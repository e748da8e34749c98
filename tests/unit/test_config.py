"""Config composition and validation: bad input fails early, naming the key and the value."""

from __future__ import annotations

import time

import pytest
from hydra.errors import ConfigCompositionException

from app.config import Config, ConfigError, check_overrides
from tests.helpers.jobs import run_app
from tests.helpers.load import scaled


@pytest.mark.parametrize(
    "experiment",
    [
        "products_homo",
        "smoke",
        "mag_hetero",
        "products_link",
        "products_temporal",
        "mag_link",
        "papers_homo",
    ],
)
def test_every_experiment_composes(compose, experiment):
    cfg = compose(f"+experiment={experiment}")
    assert isinstance(cfg, Config)
    assert cfg.experiment == experiment
    assert cfg.partition.num_parts == cfg.cluster.num_nodes


def test_required_keys_exist(compose):
    cfg = compose("+experiment=products_homo")
    for key in [
        "dataset.name",
        "dataset.num_nodes",
        "sampler.num_neighbors",
        "loader.batch_size",
        "loader.num_workers",
        "model.name",
        "model.hidden_channels",
        "model.num_layers",
        "train.epochs",
        "train.lr",
        "cluster.num_nodes",
        "cluster.procs_per_node",
        "mlflow.tracking_uri",
        "mlflow.experiment_name",
        "seed",
    ]:
        obj = cfg
        for part in key.split("."):
            obj = getattr(obj, part)  # AttributeError names a missing key


def test_groups_switch(compose):
    cfg = compose("model=gat", "partition=random", "dataset=synthetic_mag")
    assert (cfg.model.name, cfg.partition.method, cfg.dataset.name) == (
        "gat",
        "random",
        "synthetic_mag",
    )


@pytest.mark.parametrize(
    "override, match",
    [
        ("sampler.num_neighbors=[5]", "sampler.num_neighbors.*num_layers=3"),
        ("loader.batch_size=0", "loader.batch_size=0"),
        ("train.epochs=-1", "train.epochs=-1"),
        ("model.name=transformer", "model.name='transformer'"),
        ("sampler.num_neighbors=[5,0,2]", "positive"),
        ("cluster.mode=ssh", "cluster.ip_config"),
        ("partition.order=bfs", "partition.order='bfs'.*original, locality"),
        ("partition.order=locality", "partition.order='locality'.*partition.relabel=true"),
        ("sampler.feature_wire_dtype=int8", "feature_wire_dtype='int8'.*store, float16"),
        ("sampler.hot_cache_bytes=-1", "sampler.hot_cache_bytes=-1: must be a whole number"),
        ("train.ddp_comm_hook=int8", "train.ddp_comm_hook='int8': expected one of none, fp16"),
        ("train.ddp_comm_hook=bf16", "train.ddp_comm_hook='bf16': PyTorch's bf16 hook needs NCCL"),
        ("train.ddp_bucket_cap_mb=0", "train.ddp_bucket_cap_mb=0.0: must be > 0"),
        (
            "sampler.feature_wire_dtype=bfloat16 dataset.feature_dtype=float16",
            "feature_wire_dtype='bfloat16': would round the float16 store's features again",
        ),
    ],
)
def test_cross_field_errors(compose, override, match):
    with pytest.raises(ConfigError, match=match):
        compose(*override.split(" "))


def test_dict_fanouts_checked_per_edge_type(compose):
    cfg = compose("sampler=mag", "model.num_layers=2")
    assert cfg.sampler.num_neighbors["paper__cites__paper"] == [10, 5]
    assert len(cfg.sampler.num_neighbors) == 7
    with pytest.raises(ConfigError, match="has 2 hops but model.num_layers=3"):
        compose("sampler=mag", "model.num_layers=3")
    with pytest.raises(ConfigError, match="has 1 hops"):
        compose(
            "sampler=mag", "model.num_layers=2", "sampler.num_neighbors.paper__cites__paper=[4]"
        )


def test_unknown_key_and_wrong_type_fail_at_compose(compose):
    with pytest.raises(ConfigCompositionException):
        compose("train.epochz=3")
    with pytest.raises(ConfigCompositionException):
        compose("train.epochs=abc")


@pytest.mark.dist
def test_cli_typo_fails_fast_naming_the_key():
    start = time.monotonic()
    proc = run_app("+experiment=products_homo", "train.epochz=3", timeout=30)
    assert proc.returncode != 0
    assert "config error: train.epochz=3: unknown key" in proc.stderr
    assert time.monotonic() - start < scaled(10)


@pytest.mark.dist
def test_cli_cross_field_error_is_one_line(tmp_path):
    proc = run_app(
        "+experiment=products_homo", "loader.batch_size=-4", f"output_dir={tmp_path}", timeout=30
    )
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln]
    assert lines == ["config error: loader.batch_size=-4: must be > 0"]


@pytest.mark.dist
def test_cli_prints_composed_config():
    proc = run_app("+experiment=products_homo", "--cfg", "job", timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "num_neighbors" in proc.stdout and "experiment: products_homo" in proc.stdout


@pytest.mark.parametrize(
    "arg, message",
    [
        ("train.epochz=3", "train.epochz=3: unknown key 'epochz'; did you mean train.epochs?"),
        ("modle.name=gat", "modle.name=gat: unknown key 'modle'; did you mean model?"),
        ("train.epochs=abc", "train.epochs=abc: Value 'abc' of type 'str' could not be converted"),
        (
            "sampler.hot_cache_bytes=64MB",
            "sampler.hot_cache_bytes=64MB: Value '64MB' of type 'str' could not be converted",
        ),
    ],
)
def test_override_precheck_names_key_value_and_fix(arg, message):
    with pytest.raises(ConfigError) as err:
        check_overrides(["+experiment=smoke", arg])
    assert str(err.value).startswith(message)


def test_override_precheck_lets_valid_and_sweep_overrides_through():
    check_overrides(
        [
            "model=gat",
            "sampler.num_neighbors=[5,5]",
            "hydra.run.dir=x",
            "hydra/launcher=basic",
            "+foo=1",
        ]
    )
    check_overrides(
        ["-m", "model.hidden_channels=64,128", "sampler.num_neighbors='[10,5]','[15,10]'"]
    )
    with pytest.raises(ConfigError, match="hidden_channel"):
        check_overrides(["-m", "model.hidden_channel=64,128"])


@pytest.mark.parametrize("spelling", ["experiment=smoke", "+experiment=smoke"])
def test_experiment_selects_with_or_without_plus(compose, spelling):
    """`experiment: null` in the defaults (lightning-hydra-template) lets `experiment=NAME`
    select; the README's `+experiment=NAME` keeps working (Hydra alone would refuse it)."""
    cfg = compose(spelling, "model.hidden_channels=48")
    assert (cfg.experiment, cfg.dataset.num_nodes, cfg.model.hidden_channels) == ("smoke", 2000, 48)
    assert compose().experiment is None


def test_debug_fast_overrides_the_experiment(compose):
    base = compose("experiment=products_homo")
    cfg = compose("debug=fast", "experiment=products_homo")  # order-free: debug comes last
    assert (cfg.train.epochs, cfg.train.max_steps_per_epoch) == (1, 3)
    assert not cfg.mlflow.enabled and not cfg.train.checkpoint
    assert cfg.model == base.model and cfg.dataset == base.dataset
    assert compose("+experiment=smoke", "+debug=limit").train.epochs == 3


@pytest.mark.parametrize(
    "arg, message",
    [
        (
            "sampler.num_neighbors=10,5",
            "sampler.num_neighbors=10,5: a comma-separated value is ambiguous; a list is written "
            "sampler.num_neighbors=[10,5], a sweep over the values needs -m",
        ),
        ("model=gat,sage", "model=gat,sage: model selects one option; a sweep over them needs -m"),
        ("train.lr=choice(0.1,0.01)", "train.lr=choice(0.1,0.01): a sweep needs -m"),
    ],
)
def test_comma_without_multirun_is_one_line(arg, message):
    with pytest.raises(ConfigError) as err:
        check_overrides(["experiment=smoke", arg])
    assert str(err.value) == message
    check_overrides(["-m", "experiment=smoke", arg])  # with -m: a real sweep, Hydra's to expand


@pytest.mark.dist
def test_cli_list_without_brackets_is_one_line(tmp_path):
    proc = run_app(
        "experiment=smoke", "sampler.num_neighbors=10,5", f"output_dir={tmp_path}", timeout=30
    )
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln]
    assert lines == [
        "config error: sampler.num_neighbors=10,5: a comma-separated value is ambiguous; a list "
        "is written sampler.num_neighbors=[10,5], a sweep over the values needs -m"
    ]
