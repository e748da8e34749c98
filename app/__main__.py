"""`python -m app +experiment=NAME [overrides]`: compose, validate, dispatch.

`python -m app report ...` (also `distgnn report ...`) prints results tables instead: app/report.py.
"""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from app.config import CONF_DIR, ConfigError, check_overrides, register_configs, to_config

register_configs()
log = logging.getLogger("distgnn")


# An absolute config dir: found the same way from `python -m app` and the `distgnn` script.
@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(node: DictConfig) -> float | None:
    try:
        cfg = to_config(node)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(2)
    # -- issue 15: real OGB data missing -> one line, before any work or process --
    if cfg.dataset.name.startswith("ogbn_"):  # (app.dataset imports PyG: only when needed)
        from app.dataset.ogb import OgbDataMissingError, precheck

        try:
            precheck(cfg.dataset)
        except OgbDataMissingError as err:
            print(f"data error: {err}", file=sys.stderr)
            sys.exit(2)
    # --
    from app.tasks import run_task

    return run_task(cfg)


def cli() -> None:
    """`python -m app ...` and the `distgnn` console script."""
    # -- issue 15: `report` is a subcommand that reads the MLflow store, not a Hydra run --
    if sys.argv[1:2] == ["report"]:
        from app.report import main as report

        sys.exit(report(sys.argv[2:]))
    # --
    try:
        check_overrides(sys.argv[1:])
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(2)
    main()


if __name__ == "__main__":
    cli()
