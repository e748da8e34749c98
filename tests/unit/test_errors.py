"""Bad input a new user types: one line on stderr, exit 2, before any work or process."""

from __future__ import annotations

import pytest

from app.config import ConfigError, check_overrides
from tests.helpers.jobs import run_app


@pytest.mark.dist
def test_experiment_typo_is_one_line_with_did_you_mean(tmp_path):
    proc = run_app("+experiment=smok", f"output_dir={tmp_path}", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("config error: +experiment=smok: no conf/experiment/smok.yaml")
    assert "did you mean +experiment=smoke?" in proc.stderr


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["model=gatt"], "did you mean model=gat?"),
        (["-m", "+experiment=smoke", "dataset=synthetic_product,ogbn_mag"], "synthetic_products"),
    ],
)
def test_group_option_typos(argv, hint):
    with pytest.raises(ConfigError, match=hint):
        check_overrides(argv)
    check_overrides(["-m", "model=sage,gat", "model=glob(*)"])  # valid choices and sweep syntax


@pytest.mark.dist
def test_missing_ogb_data_is_one_line_before_any_work(tmp_path):
    proc = run_app(
        "dataset=ogbn_products",
        f"output_dir={tmp_path}",
        f"dataset.root={tmp_path / 'data'}",
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"data error: {tmp_path / 'data' / 'ogbn_products'}")
    assert "use dataset=synthetic_products" in proc.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "partitions").exists()
