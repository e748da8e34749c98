"""distgnn: a Hydra-configured runner for distributed GNN training.

`python -m app` (`__main__`: compose, validate) hands the config to `run` (the dispatcher:
partition, one-process training, or a distributed job). The rooms, in the data's order:
`config` → `dataset` → `partition` → `distributed` (PyG-compatible stores, RPC sampling,
`Dist*Loader`) / `sampler` → `loader` → `model` → `task` (objectives) → `train` (fit, the
trainer role's main) → `tracking` (MLflow, summaries, `report`). `launch` (plans, spawning,
watching, pre-flight checks) imports nothing above it: the plan names each role's main as a
string (`launch.plan.ROLE_MAINS`). `contract` holds the names the launcher and its children
share; the Hydra launcher plugin in `launchers/hydra_plugins/distgnn_launcher` is a thin layer
over `launch`.
"""

from app.jit import install as _install_kernel_cache  # noqa: E402

_install_kernel_cache()  # before any kernel module is imported
