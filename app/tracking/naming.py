"""Readable, unique MLflow run names: `<experiment>-<overrides>-<short id>`.

MLflow's own random names (`overjoyed-slug-911`) repeat and say nothing. The name here starts
with the experiment, then the job's command-line overrides that change the model or the data
(read from Hydra's `<job_dir>/.hydra/overrides.yaml`, keys shortened to their last part), then
six hex digits so two runs of the same command never share a name.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from app.tracking.redact import redact_override

MAX_NAME = 90
# Overrides that say where/how a job ran rather than what it trained: left out of run names.
_SKIPPED = ("+experiment=", "experiment=", "output_dir=", "dataset.root=", "mlflow.", "hydra.")


def job_overrides(job_dir: str | Path | None) -> list[str]:
    """The job's command-line overrides (Hydra's `.hydra/overrides.yaml`), or []."""
    if not job_dir:
        return []
    path = Path(job_dir) / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return []
    from omegaconf import OmegaConf

    return [str(o) for o in OmegaConf.load(path)]


def short_override(override: str) -> str:
    """`model.hidden_channels=64` -> `hidden_channels=64` (no spaces), redacted first: with
    its spaces gone, `sshpass -p PW ssh` would no longer read as a password."""
    key, _, value = redact_override(override).lstrip("+~").partition("=")
    return f"{key.rsplit('.', 1)[-1]}={value}".replace(" ", "")


def run_name(cfg: Any, job_dir: str | Path | None = None) -> str:
    """`<experiment or dataset>[-<overrides>]-<6 hex>`, at most about MAX_NAME characters."""
    base = getattr(cfg, "experiment", None) or getattr(getattr(cfg, "dataset", None), "name", "run")
    shown = [short_override(o) for o in job_overrides(job_dir) if not o.startswith(_SKIPPED)]
    name = "-".join([base, *shown])
    if len(name) > MAX_NAME:
        name = name[: MAX_NAME - 1] + "~"
    return f"{name}-{uuid.uuid4().hex[:6]}"
