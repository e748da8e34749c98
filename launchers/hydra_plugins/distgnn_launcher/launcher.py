"""`DistgnnLauncher`: Hydra's launcher interface, delegating the work to `_core`."""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class DistgnnLauncher(Launcher):
    """Runs a sweep's jobs sequentially; each job is itself a multi-process distributed job."""

    def __init__(self, mlflow_parent: bool = True, stop_on_failure: bool = False) -> None:
        self.mlflow_parent = mlflow_parent
        self.stop_on_failure = stop_on_failure
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None
        self.parent_run_id: str | None = None
        self.rows: list = []  # every job's summary row so far: a sweeper may launch in batches
        self.job_offset: int | None = None  # added to job numbers (a resumed Optuna study)

    def setup(
        self,
        *,
        hydra_context: HydraContext,
        task_function: TaskFunction,
        config: DictConfig,
    ) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function
        # before the sweeper's first batch: Optuna's study storage lives in the sweep dir
        from . import _core

        _core.prepare_sweep_dir(config)

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from . import _core

        return _core.launch(self, job_overrides, initial_job_idx)
