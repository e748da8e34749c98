"""`python -m app +experiment=NAME [overrides]`: compose, validate, dispatch."""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from app.config import ConfigError, check_overrides, register_configs, to_config

register_configs()
log = logging.getLogger("distgnn")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(node: DictConfig) -> float | None:
    try:
        cfg = to_config(node)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(2)
    from app.tasks import run_task

    return run_task(cfg)


if __name__ == "__main__":
    try:
        check_overrides(sys.argv[1:])
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(2)
    main()
