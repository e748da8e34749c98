"""Redaction (issue 28, finding 5): every credential form, in every sink that leaves the process.

Two module-scoped fixtures drive the real paths once. `store_sinks`, with no process: an
MLflow run in a real SQLite store (params, tags with the `overrides` tag, config.yaml /
overrides.yaml artifacts) and the printed run summary. `child_sinks` (marked `dist`): a real
child process whose output the launcher's pump writes to its log and echoes to the console,
and the launcher's upload of that log to the same run (`app.launch.job._close_tracking`).
Each (form, sink) pair is then its own test: the form's secret must not appear in the sink.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from app.config import Config
from app.launch.job import _close_tracking
from app.launch.plan import ProcSpec
from app.launch.spawn import run_procs
from app.runtime import Runtime
from app.tracking.mlflow import RUN_INFO_FILE, MlflowTracker
from app.tracking.redact import redact_text
from app.tracking.summary import print_run_summary

# form -> (text carrying the secret, the secret)
FORMS = {
    "url_user_password": ("http://alice:PWuserpw1@host:5000", "PWuserpw1"),
    "url_token_user": ("http://TOKENonly2@host:5000", "TOKENonly2"),
    "url_empty_user": ("https://:PWempty3@host/api", "PWempty3"),
    "query_token": ("https://host/api?token=QTOKEN4&x=1", "QTOKEN4"),
    "query_key": ("https://host/api?x=1&key=QKEY5", "QKEY5"),
    "query_password": ("https://host/api?password=QPW6", "QPW6"),
    "query_secret": ("https://host/api?client_secret=QSECRET7#frag", "QSECRET7"),
    "sshpass": ("sshpass -p SSHPW8 ssh -o StrictHostKeyChecking=no", "SSHPW8"),
    "ssh_key_file": ("ssh -i /home/alice/.ssh/KEYFILE9 -p 22", "KEYFILE9"),
}
STORE_SINKS = ("params", "tags", "overrides_tag", "config_artifact", "overrides_artifact",
               "console_summary")  # fmt: skip
CHILD_SINKS = ("uploaded_log", "console_echo", "child_log_tail")


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Config, Path, str]:
    """(config, job dir, run id): the job's MLflow run in a SQLite store, params, tags and
    artifacts logged with every form, ended FAILED as a failed launcher ends it."""
    tmp = tmp_path_factory.mktemp("redact")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    job = tmp / "job"
    (job / ".hydra").mkdir(parents=True)
    # Neutral keys (`note.f0`): the text rules must find each form, not the key's name.
    notes = {f"f{i}": text for i, (text, _) in enumerate(FORMS.values())}
    overrides = [f"+note.{key}='{text}'" for key, text in notes.items()]
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    cfg = Config()
    cfg.mlflow.tracking_uri = uri
    (job / "config.yaml").write_text(yaml.safe_dump({"note": notes, "uri": uri}))
    tracker = MlflowTracker(uri, "redact")
    run_id = tracker.start(cfg, tags={"job_dir": str(job)})
    tracker.log_params({f"note.{k}": t for k, t in notes.items()})
    tracker.set_tags({f"note.{k}": t for k, t in notes.items()})
    tracker.log_artifact(job / "config.yaml")
    tracker.log_artifact(job / ".hydra" / "overrides.yaml")
    tracker.end("FAILED", error="boom")
    return cfg, job, run_id


def _artifacts(cfg: Config, run_id: str, into: Path) -> Path:
    from mlflow.tracking import MlflowClient

    return Path(MlflowClient(cfg.tracking_uri).download_artifacts(run_id, "", str(into)))


@pytest.fixture(scope="module")
def store_sinks(job) -> dict[str, str]:
    """The text of the run's params, tags and artifacts, and of the printed run summary."""
    import io
    from contextlib import redirect_stdout

    from mlflow.tracking import MlflowClient

    cfg, job_dir, run_id = job
    run = MlflowClient(cfg.tracking_uri).get_run(run_id)
    art = _artifacts(cfg, run_id, job_dir.parent / "store")
    summary = io.StringIO()
    for text, _ in FORMS.values():  # the summary prints the store's UI command
        info = {"run_id": run_id, "run_name": "r", "experiment_id": "1", "tracking_uri": text}
        (job_dir / RUN_INFO_FILE).write_text(json.dumps(info))
        with redirect_stdout(summary):
            print_run_summary(cfg, job_dir, {"test_acc": 0.5})
    return {
        "params": json.dumps(run.data.params),
        "tags": json.dumps(run.data.tags),
        "overrides_tag": run.data.tags["overrides"],
        "config_artifact": (art / "config.yaml").read_text(),
        "overrides_artifact": (art / "overrides.yaml").read_text(),
        "console_summary": summary.getvalue(),
    }


@pytest.fixture(scope="module")
def child_sinks(job) -> dict[str, str]:
    """The text a real child's output reaches: the launcher's console echo, the failure's log
    tail, and the child's log as the launcher uploads it to the run."""
    import io
    from contextlib import redirect_stdout

    cfg, job_dir, run_id = job
    # A real child: its output goes through the launcher's pump (log file, console echo).
    code = "".join(f"print({text!r})\n" for text, _ in FORMS.values()) + "raise SystemExit(3)"
    rt = Runtime("trainer", 0, 1, 0, 1, -1, 0, "127.0.0.1", 1, 2, "", "", "")
    spec = ProcSpec("trainer0-0", "trainer", 0, "127.0.0.1", [sys.executable, "-c", code], {}, rt)
    echo = io.StringIO()
    tail = ""
    with redirect_stdout(echo):
        try:
            run_procs([spec], job_dir / "logs", echo=["trainer0-0"])
        except Exception as err:  # JobFailed: its message carries the child's last lines
            tail = str(err)
    _close_tracking(cfg, job_dir, "FAILED")  # the launcher uploads logs/ to the run
    art = _artifacts(cfg, run_id, job_dir.parent / "child")
    return {
        "uploaded_log": (art / "logs" / "trainer0-0.log").read_text(),
        "console_echo": echo.getvalue(),
        "child_log_tail": tail,
    }


def _no_secret_in(sinks: dict[str, str], form: str, sink: str) -> None:
    text, secret = FORMS[form]
    assert sinks[sink], f"sink {sink} is empty: the test did not reach it"
    assert secret not in sinks[sink], f"{form} leaked into {sink}"
    assert "***" in sinks[sink]


@pytest.mark.parametrize("sink", STORE_SINKS)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_no_secret_reaches_the_store_or_the_summary(store_sinks, form, sink):
    _no_secret_in(store_sinks, form, sink)


@pytest.mark.dist
@pytest.mark.parametrize("sink", CHILD_SINKS)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_no_secret_leaves_through_a_child(child_sinks, form, sink):
    _no_secret_in(child_sinks, form, sink)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_rest_of_the_text_is_kept(form):
    """Only the secret's span goes (the whole userinfo, the whole key path): the host, path
    and other options stay readable, in order."""
    text, secret = FORMS[form]
    head, tail = redact_text(text).split("***")
    assert text.startswith(head) and text.endswith(tail) and secret not in head + tail
    assert len(text) - len(head) - len(tail) < len(secret) + 20


@pytest.mark.parametrize(
    "text",
    ["sqlite:////tmp/x/mlflow.db", "file:///tmp/a@b", "loss=2.31 lr=0.01", "python -ignore x"],
)
def test_harmless_text_is_untouched(text):
    assert redact_text(text) == text
