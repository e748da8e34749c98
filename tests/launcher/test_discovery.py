"""Hydra finds the distgnn launcher (namespace package on sys.path via the .pth file)."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.launcher import Launcher
from hydra_plugins.distgnn_launcher.launcher import DistgnnLauncher

from tests.helpers.jobs import REPO


def test_discovered_by_hydra():
    names = [p.__name__ for p in Plugins.instance().discover(Launcher)]
    assert DistgnnLauncher.__name__ in names


def test_config_registered_under_hydra_launcher():
    import hydra_plugins.distgnn_launcher.config  # noqa: F401  (registers on import)

    node = ConfigStore.instance().load("hydra/launcher/distgnn.yaml").node
    assert node._target_ == "hydra_plugins.distgnn_launcher.launcher.DistgnnLauncher"


def test_hydra_plugins_is_a_namespace_package():
    import hydra_plugins

    assert getattr(hydra_plugins, "__file__", None) is None  # no __init__.py anywhere


def _launcher_target(*overrides: str) -> str:
    from hydra import compose, initialize_config_dir

    from app.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
    return cfg.hydra.launcher._target_


def test_selectable_as_hydra_launcher():
    assert _launcher_target("hydra/launcher=distgnn").endswith(".DistgnnLauncher")


def test_app_config_selects_it_by_default():
    """conf/config.yaml has `override hydra/launcher: distgnn`, so `-m` sweeps use it."""
    assert _launcher_target().endswith(".DistgnnLauncher")
