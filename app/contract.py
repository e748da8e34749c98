"""The job contract: names the launcher, its children and the Hydra launcher plugin share.

Each name is defined here once and imported wherever it is read or written, so a process
that writes a job-dir file and the one that reads it cannot drift apart.
"""

from __future__ import annotations

# -- environment ------------------------------------------------------------------------------
PARENT_RUN_ENV = "DISTGNN_MLFLOW_PARENT_RUN_ID"  # a sweep's MLflow parent run (set by the plugin)

# -- files in a job dir -----------------------------------------------------------------------
CONFIG_FILE = "config.yaml"  # the composed config every child loads
RESULT_FILE = "result.json"  # final metrics, written atomically by the rank-0 trainer
RUN_ID_FILE = "mlflow_run_id"  # the MLflow run the job logged to (read by summaries)
RUN_INFO_FILE = "mlflow_run.json"  # run id and name, experiment id, store

# -- node splits ------------------------------------------------------------------------------
SPLITS = ("train", "val", "test")  # the seed sets of a node task, in this order
EVAL_SPLITS = SPLITS[1:]  # the held-out ones evaluation reports
