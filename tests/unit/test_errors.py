"""Bad input a new user types: one line on stderr, exit 2, before any work or process."""

from __future__ import annotations

import subprocess

import pytest

from app.config import ConfigError, check_overrides
from tests.helpers.jobs import PYTHON, REPO, run_app


@pytest.mark.dist
def test_experiment_typo_is_one_line_with_did_you_mean(tmp_path):
    proc = run_app("+experiment=smok", f"output_dir={tmp_path}", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    # `+experiment=` and `experiment=` are one override (lightning-hydra-template's spelling)
    assert proc.stderr.startswith("config error: experiment=smok: no conf/experiment/smok.yaml")
    assert "did you mean experiment=smoke?" in proc.stderr


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
def test_missing_ogb_data_is_one_line_before_torch_is_imported(tmp_path):
    """`python -m app` (run as such, through runpy) names the missing files before it imports
    torch or PyG: the refusal costs the config's composition, not seconds of imports."""
    heavy = "print('imported:', *sorted({'torch', 'torch_geometric'} & set(sys.modules)))"
    code = f"import atexit, runpy, sys; atexit.register(lambda: {heavy}); "
    code += "runpy.run_module('app', run_name='__main__', alter_sys=True)"
    data = tmp_path / "data"
    argv = ["+experiment=products_homo", "dataset=ogbn_products", f"dataset.root={data}"]
    proc = subprocess.run(
        [PYTHON, "-c", code, *argv, f"output_dir={tmp_path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"data error: {data / 'ogbn_products'} does not exist ")
    assert "products.zip" in proc.stderr and "use dataset=synthetic_products" in proc.stderr
    assert proc.stdout == "imported:\n"
    assert list(tmp_path.iterdir()) == [], "no run dir, store or partition for a refused job"
