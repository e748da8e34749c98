"""The MLflow UI for a store: `serve` it (URL printed once it answers), or `check` it in Chromium.

`python -m app.tracking.ui serve [--store outputs/mlflow.db] [--port 5000]` (`make ui`) starts
`mlflow ui` and prints the URL only when the server accepts connections (it takes ~20 s to come
up, and a URL printed earlier leads to "connection refused").

`python -m app.tracking.ui check [--store ...] [--out outputs/ui-check]` (`make ui-check`, opt-in:
needs a `chromium` binary, looked for first) serves the store on a free port, opens the newest
experiment's page in headless Chromium (at `summary.experiment_url`: model-training mode, chart
view), closes the assistant panel, unfolds sweeps, waits for the charts to be drawn
(`app.tracking.ui_browser`) and saves `experiment.png` plus the rendered DOM
(`experiment.html`). It fails (exit 1, one line) when the page shows MLflow's GenAI
navigation, no "Model metrics" charts, or not the newest run (a sweep's job: its sweep's run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.tracking import ui_layout

START_TIMEOUT_S = 300.0  # ~20 s on an idle machine, minutes on a loaded one
BROWSER_TIMEOUT_S = 120.0
STOP_GRACE_S = 3.0  # a viewer holds nothing to flush: SIGKILL what SIGTERM has not ended by then
GENAI_MARKER = ">Evaluation runs<"  # in the GenAI navigation only
CHARTS_MARKER = "Model metrics"  # heading of the runs' metric charts
SETTLE_S = 2.0
# Page scripts of `browse`: the runs table has rows; close the assistant panel and expand the
# sweeps' rows; at least a row of metric charts is drawn (plotly) and none is still loading.
ROWS_SHOWN = "document.querySelectorAll('.ag-row').length > 0"
TIDY_PAGE = """(() => {
  document.querySelectorAll('button[aria-label="Close"]').forEach(b => b.click());
  document.querySelectorAll('button[data-component-id*="runnamecellrenderer"]')
    .forEach(b => b.click());
  return true;
})()"""
CHARTS_DRAWN = "document.querySelectorAll('.js-plotly-plot').length >= 3"


def wait_for_port(host: str, port: int, proc: subprocess.Popen, timeout: float) -> None:
    """Return once `host:port` accepts a connection; RuntimeError if `proc` dies or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow ui exited with status {proc.returncode} before serving")
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"mlflow ui did not accept connections on {host}:{port} in {timeout:.0f} s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's whole process group (uvicorn workers outlive `mlflow ui`), then KILL."""
    for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 1.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _group_alive(proc.pid):
            time.sleep(0.2)
        if not _group_alive(proc.pid):
            break
    proc.wait(5)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@contextmanager
def mlflow_ui(store: Path, port: int, log_file: Path | None = None) -> Iterator[str]:
    """Run `mlflow ui` over the SQLite `store` on 127.0.0.1:`port`; yield its URL when it answers.

    One worker and no job-execution consumers: a local viewer, on a machine that also trains.
    """
    mlflow = Path(sys.executable).parent / "mlflow"
    cmd = [str(mlflow), "ui", "--backend-store-uri", f"sqlite:///{store.resolve()}"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    if log_file:
        log_file.parent.mkdir(parents=True, exist_ok=True)
    out = open(log_file, "w") if log_file else subprocess.DEVNULL  # closed in `finally`
    proc = subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        wait_for_port("127.0.0.1", port, proc, START_TIMEOUT_S)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)
        if log_file:
            out.close()


def serve(store: Path, port: int) -> int:
    """Serve until Ctrl-C or SIGTERM (the server stopped within STOP_GRACE_S + 1 s either way);
    the URL is printed once the server accepts connections."""
    if not store.is_file():
        print(
            f"ui: no MLflow store at {store} yet: run a job first (e.g. make run)", file=sys.stderr
        )
        return 2
    print(f"starting the MLflow UI over {store} ...", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # `make ui` forwards SIGTERM: stop the server too
    try:
        with mlflow_ui(store, port, store.parent / "mlflow-ui.log") as url:
            print(f"MLflow UI: {url}  (Ctrl-C stops it; log: {store.parent / 'mlflow-ui.log'})")
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except RuntimeError as err:
        print(f"ui: {err} (see {store.parent / 'mlflow-ui.log'})", file=sys.stderr)
        return 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def newest_experiment(store: Path) -> tuple[str, str]:
    """(experiment id, newest run's name) of the experiment with the newest run."""
    from app.tracking.mlflow import quiet_mlflow

    quiet_mlflow()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{store.resolve()}")
    ids = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(ids, order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        raise RuntimeError(f"no runs in {store}: run a job first")
    run = runs[0]
    parent = run.data.tags.get("mlflow.parentRunId")
    if parent:  # a sweep's job: the runs table lists its parent, the job collapsed under it
        run = client.get_run(parent)
    return run.info.experiment_id, run.info.run_name


def chromium() -> str:
    """The Chromium binary; RuntimeError (at once, before any server starts) if none."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise RuntimeError("no chromium binary: apt-get install chromium (Debian) first")
    return browser


def browse(url: str, out: Path, browser: str) -> tuple[str, dict[str, Any]]:
    """Screenshot `url` into `out/experiment.png` once its charts are drawn; return the DOM and
    the chart view's layout (`ui_layout.LAYOUT`: sections and chart titles with their places).

    The runs table loads first; then the assistant side panel is closed and every sweep's row
    expanded (its jobs' curves join the charts), and the picture waits for the plots."""
    from app.tracking.ui_browser import Chromium

    out.mkdir(parents=True, exist_ok=True)
    with Chromium(browser) as page:
        page.open_when_ready(url, ROWS_SHOWN, BROWSER_TIMEOUT_S)
        page.evaluate(TIDY_PAGE)
        page.wait_until(CHARTS_DRAWN, BROWSER_TIMEOUT_S)
        time.sleep(SETTLE_S)  # the last plots' transitions
        page.screenshot(out / "experiment.png")
        dom, layout = page.dom(), page.evaluate(ui_layout.LAYOUT)
    (out / "experiment.html").write_text(dom)
    return dom, layout


def check(store: Path, out: Path) -> int:
    """Open the newest experiment in Chromium; 0 when it opens on the training charts: the
    first section holds `loss` and the monitored metric, both above the fold (`ui_layout`)."""
    from app.tracking.summary import experiment_url

    try:
        browser = chromium()
        exp_id, run_name = newest_experiment(store)
        with mlflow_ui(store, free_port(), out / "mlflow-ui.log") as url:
            sections, monitor = ui_layout.server_sections(url, exp_id)
            page = experiment_url(exp_id, url)
            dom, layout = browse(page, out, browser)
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        print(f"ui-check: {err}", file=sys.stderr)
        return 1
    problems = [
        *(["GenAI navigation shown"] if GENAI_MARKER in dom else []),
        *([f"no {CHARTS_MARKER!r} charts"] if CHARTS_MARKER not in dom else []),
        *([f"newest run {run_name} not shown"] if run_name not in dom else []),
        *ui_layout.section_problems(sections, monitor),
        *ui_layout.page_problems(layout, sections, monitor),
    ]
    if problems:
        print(
            f"ui-check: {page}: {'; '.join(problems)}; see {out / 'experiment.png'}",
            file=sys.stderr,
        )
        return 1
    names = ", ".join(f"{name} ({len(keys)})" for name, keys in sections)
    print(
        f"ui-check: {page} opens on the training charts (newest run {run_name}): sections "
        f"{names}; loss and {monitor} above the fold: {out}/experiment.png"
    )
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.tracking.ui")
    parser.add_argument("action", choices=("serve", "check"))
    parser.add_argument("--store", type=Path, default=Path("outputs/mlflow.db"))
    parser.add_argument("--port", type=int, default=5000)
    parser.add_argument("--out", type=Path, default=Path("outputs/ui-check"))
    args = parser.parse_args(argv)
    if args.action == "serve":
        return serve(args.store, args.port)
    return check(args.store, args.out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
