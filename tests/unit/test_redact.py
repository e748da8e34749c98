"""Redaction (issue 28, finding 5; issue 37, item 3): every credential form, in every sink
that leaves the process, the run name included, in a SQLite store and on a tracking server.

Module-scoped fixtures drive the real paths once. `store_sinks`, with no process: an MLflow
run in a real SQLite store (params, tags with the `overrides` tag, config.yaml /
overrides.yaml artifacts) and the printed run summary. `name_sinks`: one run per form, named
by the tracker from the job's overrides (`naming.run_name`), as the run name in the store,
MLflow's `mlflow.runName` tag, `mlflow_run.json` and the summary. `child_sinks` (marked
`dist`): a real child process whose output the launcher's pump writes to its log and echoes to
the console, and the launcher's upload of that log to the same run
(`app.launch.job._close_tracking`). `server_sinks` (marked `dist`): the same runs logged to a
real `mlflow server` on 127.0.0.1, read back through it and from its own database file.
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
from app.launch.spawn import JobFailed, run_procs
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
    # issue 37: each leaked before (the secret is the part that was left readable)
    "url_at_in_password": ("http://bob:PWat@TAILAT10@host:5000", "TAILAT10"),
    "sshpass_quoted_space": ("sshpass -p 'SP QSPACE11' ssh host", "QSPACE11"),
    "sshpass_long_flag": ("sshpass --password LONGPW12 ssh host", "LONGPW12"),
    "flag_equals": ("hub --api-key=EQKEY13 push", "EQKEY13"),
    "bearer_header": ("curl -H 'Authorization: Bearer BEARER14' https://h/api", "BEARER14"),
    "api_key_header": ("curl -H 'X-Api-Key: APIKEY15' https://h/api", "APIKEY15"),
    "passphrase": ("ssh-keygen passphrase=PHRASE16 -q", "PHRASE16"),
    "auth": ("client auth=AUTHV17 -v", "AUTHV17"),
    "password_quoted_space": ("db password='two WORDS18' port=5", "WORDS18"),
    "token_flag": ("hub --token TOKFLAG19 push", "TOKFLAG19"),
    "ssh_cmd_in_run_name": ("sshpass -p SECRET20 ssh -i /keys/KEY20", "SECRET20"),
}
STORE_SINKS = ("params", "tags", "overrides_tag", "config_artifact", "overrides_artifact",
               "console_summary")  # fmt: skip
CHILD_SINKS = ("uploaded_log", "console_echo", "child_log_tail")
NAME_SINKS = ("run_name", "run_name_tag", "run_info_file", "summary_run_line")
SERVER_SINKS = (*STORE_SINKS, "server_database", "server_artifacts")


def _overrides(job: Path, notes: dict[str, str]) -> None:
    """Hydra's `.hydra/overrides.yaml` of a job run with `+note.<key>="<text>"`."""
    (job / ".hydra").mkdir(parents=True)
    overrides = [f'+note.{key}="{text}"' for key, text in notes.items()]
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))


def _log_job(uri: str, job: Path) -> tuple[Config, Path, str]:
    """(config, job dir, run id): the job's MLflow run in store `uri`, params, tags and
    artifacts logged with every form, ended FAILED as a failed launcher ends it."""
    # Neutral keys (`note.f0`): the text rules must find each form, not the key's name.
    notes = {f"f{i}": text for i, (text, _) in enumerate(FORMS.values())}
    _overrides(job, notes)
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


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Config, Path, str]:
    tmp = tmp_path_factory.mktemp("redact")
    return _log_job(f"sqlite:///{tmp / 'mlflow.db'}", tmp / "job")


def _artifacts(cfg: Config, run_id: str, into: Path) -> Path:
    from mlflow.tracking import MlflowClient

    return Path(MlflowClient(cfg.tracking_uri).download_artifacts(run_id, "", str(into)))


def _summary(cfg: Config, job_dir: Path) -> str:
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        print_run_summary(cfg, job_dir, {"test_acc": 0.5})
    return out.getvalue()


@pytest.fixture(scope="module")
def store_sinks(job) -> dict[str, str]:
    return _store_sinks(*job)


def _store_sinks(cfg: Config, job_dir: Path, run_id: str) -> dict[str, str]:
    """The text of the run's params, tags and artifacts, and of the printed run summary."""
    from mlflow.tracking import MlflowClient

    run = MlflowClient(cfg.tracking_uri).get_run(run_id)
    art = _artifacts(cfg, run_id, job_dir.parent / "store")
    summary = ""
    for text, _ in FORMS.values():  # the summary prints the store's UI command
        info = {"run_id": run_id, "run_name": "r", "experiment_id": "1", "tracking_uri": text}
        (job_dir / RUN_INFO_FILE).write_text(json.dumps(info))
        summary += _summary(cfg, job_dir)
    return {
        "params": json.dumps(run.data.params),
        "tags": json.dumps(run.data.tags),
        "overrides_tag": run.data.tags["overrides"],
        "config_artifact": (art / "config.yaml").read_text(),
        "overrides_artifact": (art / "overrides.yaml").read_text(),
        "console_summary": summary,
    }


def _name_sinks(uri: str, root: Path) -> dict[str, dict[str, str]]:
    """Per form: a run the tracker names from a job run with `+note.cmd="<form>"` (as
    `cluster.ssh_cmd='sshpass -p PW ssh -i KEY'` names it), and that name wherever it goes."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    sinks = {}
    for form, (text, _) in FORMS.items():
        job = root / form
        _overrides(job, {"cmd": text})
        cfg = Config()
        cfg.mlflow.tracking_uri = uri
        tracker = MlflowTracker(uri, "redact-names")
        run_id = tracker.start(cfg, tags={"job_dir": str(job)})
        tracker.end("FAILED", error="boom")
        run = client.get_run(run_id)
        summary = _summary(cfg, job).splitlines()
        sinks[form] = {
            "run_name": run.info.run_name,
            "run_name_tag": run.data.tags["mlflow.runName"],
            "run_info_file": (job / RUN_INFO_FILE).read_text(),
            "summary_run_line": next(line for line in summary if "MLflow:" in line),
        }
    return sinks


@pytest.fixture(scope="module")
def name_sinks(tmp_path_factory) -> dict[str, dict[str, str]]:
    tmp = tmp_path_factory.mktemp("names")
    return _name_sinks(f"sqlite:///{tmp / 'mlflow.db'}", tmp)


@pytest.fixture(scope="module")
def server_sinks(tmp_path_factory) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The job's run and the named runs logged to a real `mlflow server` on 127.0.0.1: what
    the server gives back, and, once it is stopped, its database file and artifacts folder."""
    from tests.helpers.mlflow_server import mlflow_server

    tmp = tmp_path_factory.mktemp("server")
    with mlflow_server(tmp / "server") as server:
        sinks = _store_sinks(*_log_job(server.uri, tmp / "job"))
        names = _name_sinks(server.uri, tmp / "names")
    sinks["server_database"] = server.db.read_bytes().decode("latin-1")
    files = sorted(p for p in server.artifacts.rglob("*") if p.is_file())
    sinks["server_artifacts"] = "".join(p.read_text(errors="replace") for p in files)
    return sinks, names


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
        except JobFailed as err:  # its tail (the culprit line is picked from it) and message
            tail = "\n".join([*err.tail, str(err)])
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


@pytest.mark.parametrize("sink", NAME_SINKS)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_no_secret_in_the_run_name(name_sinks, form, sink):
    """The run name is built from the overrides with their spaces removed: redacted first."""
    _no_secret_in(name_sinks[form], form, sink)


@pytest.mark.dist
@pytest.mark.long
@pytest.mark.parametrize("sink", (*SERVER_SINKS, *NAME_SINKS))
@pytest.mark.parametrize("form", sorted(FORMS))
def test_no_secret_reaches_a_tracking_server(server_sinks, form, sink):
    store, names = server_sinks
    _no_secret_in(store if sink in SERVER_SINKS else names[form], form, sink)


def test_job_files_holding_a_secret_are_owner_only(tmp_path):
    """config.yaml and Hydra's files keep the real values (the children read them): those
    that hold one are made 0600, the others keep their mode."""
    from app.tracking.redact import restrict_job_files

    _overrides(tmp_path, {"cmd": FORMS["sshpass_quoted_space"][0]})
    (tmp_path / "config.yaml").write_text("cluster:\n  ssh_cmd: ssh -i /keys/id host\n")
    (tmp_path / ".hydra" / "hydra.yaml").write_text("hydra:\n  job:\n    name: app\n")
    for path in tmp_path.rglob("*.yaml"):
        path.chmod(0o644)
    restricted = restrict_job_files(tmp_path)
    secret = {tmp_path / "config.yaml", tmp_path / ".hydra" / "overrides.yaml"}
    assert set(restricted) == secret
    for path in tmp_path.rglob("*.yaml"):
        assert path.stat().st_mode & 0o777 == (0o600 if path in secret else 0o644), path


@pytest.mark.dist
@pytest.mark.parametrize("sink", CHILD_SINKS)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_no_secret_leaves_through_a_child(child_sinks, form, sink):
    _no_secret_in(child_sinks, form, sink)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_rest_of_the_text_is_kept(form):
    """Only the secrets' spans go (the whole userinfo, the whole key path, a quoted password
    without its quotes): the host, path, quotes and other options stay readable, in order."""
    text, secret = FORMS[form]
    kept = redact_text(text).split("***")
    assert len(kept) >= 2 and secret not in "".join(kept)
    assert text.startswith(kept[0]) and text.endswith(kept[-1])
    at = 0
    for piece in kept:
        at = text.index(piece, at) + len(piece)
    assert len(text) - sum(map(len, kept)) < len(secret) + 20 * (len(kept) - 1)


@pytest.mark.parametrize(
    "text",
    [
        "sqlite:////tmp/x/mlflow.db",
        "file:///tmp/a@b",
        "loss=2.31 lr=0.01",
        "python -ignore x",
        "ssh -p 22 -o StrictHostKeyChecking=no host",
        "[trainer0-0] 12:00:01 I distgnn: joined the RPC group",
        "don't stop: author=me",
        "loop i=5 j=-i",
    ],
)
def test_harmless_text_is_untouched(text):
    assert redact_text(text) == text


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_sweeps_table_rows_hold_no_secret(form):
    """A sweep prints a row per job with the overrides that differ (and writes summary.md):
    each row's overrides are redacted, a secret-named key's whole value too."""
    from hydra.core.utils import JobReturn, JobStatus
    from hydra_plugins.distgnn_launcher._core import job_row

    text, secret = FORMS[form]
    ret = JobReturn(overrides=[f'+note.cmd="{text}"', "db.password=two words"])
    ret.status, ret.return_value = JobStatus.COMPLETED, 0.5
    overrides = " ".join(job_row(0, ret, 1.0).overrides)
    assert secret not in overrides and "two" not in overrides and "words" not in overrides
    assert "db.password=***" in overrides
