"""Schema of the `distgnn` launcher, registered under the `hydra/launcher` config group.

No `from __future__ import annotations` here: Hydra's plugin scan executes this module before
it is in `sys.modules`, and dataclasses cannot resolve string annotations in that state.
"""

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore


@dataclass
class DistgnnLauncherConf:
    """Options of the distgnn launcher (each job's processes come from the app's `cluster`)."""

    _target_: str = "hydra_plugins.distgnn_launcher.launcher.DistgnnLauncher"
    # One MLflow parent run per sweep; every job's run is nested under it.
    mlflow_parent: bool = True
    # Stop the sweep at the first failed job instead of running the remaining ones.
    stop_on_failure: bool = False


ConfigStore.instance().store(
    group="hydra/launcher", name="distgnn", node=DistgnnLauncherConf, provider="distgnn"
)
