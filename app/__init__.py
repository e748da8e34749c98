"""distgnn: a Hydra-configured runner for distributed GNN training.

The data's path through the packages:
config → dataset → partition → store → sampler → loader → model / train → tracking,
with `launch` (process plans, spawning, watching) beside them and the Hydra launcher
plugin in `launchers/hydra_plugins/distgnn_launcher` as a thin layer over it.
"""

from app.jit import install as _install_kernel_cache  # noqa: E402

_install_kernel_cache()  # before any kernel module is imported
