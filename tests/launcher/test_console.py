"""What a person sees of a job: rank 0's bar through the log pump, one line per failure."""

from __future__ import annotations

import io
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from app.launch.plan import ProcSpec
from app.launch.spawn import JobFailed, run_procs
from app.runtime import Runtime
from app.tracking.progress_lines import CLEAR_LINE, PROGRESS_MARK, BarLines, BarView

pytestmark = pytest.mark.dist

BAR_CHILD = """
import os, sys, time
from tqdm import tqdm
from app.tracking.progress_lines import PROGRESS_ENV, bar_options
pumped = os.environ.get(PROGRESS_ENV) == "1"
for _ in tqdm(range(30), desc="epoch 0", leave=False, **bar_options(sys.stderr, pumped)):
    time.sleep(0.1)
print("after the bar", flush=True)
"""

FAILING_CHILD = """
import logging, sys
logging.basicConfig(stream=sys.stderr, format="[trainer0.0] 12:00:00 I distgnn: %(message)s")
logging.getLogger().warning("started")
def load():
    raise ValueError("bad checkpoint\\nsecond line of the message")
load()
"""


def _spec(name: str, code: str) -> ProcSpec:
    rt = Runtime("trainer", 0, 1, 0, 1, -1, 0, "127.0.0.1", 1, 2, "", "", "")
    return ProcSpec(name, "trainer", 0, "127.0.0.1", [sys.executable, "-c", code], {}, rt)


def test_bar_reaches_log_and_pipe_as_whole_lines(tmp_path, monkeypatch):
    """The pumped child's bar states are whole lines: none glued to another line, no `\\r`,
    one every LOG_EVERY_S (here 0.5 s) once the bar has run that long, and the last one when
    it ends; the next line on a line of its own."""
    from app.tracking import progress_lines

    monkeypatch.setattr(progress_lines, "LOG_EVERY_S", 0.5)
    echo = io.StringIO()  # not a terminal: lines, as a pipe gets them
    with redirect_stdout(echo):
        run_procs([_spec("trainer0-0", BAR_CHILD)], tmp_path / "logs", echo=["trainer0-0"])
    log = (tmp_path / "logs" / "trainer0-0.log").read_text()
    for text in (log, echo.getvalue()):
        assert "\r" not in text and PROGRESS_MARK not in text
        lines = text.splitlines()
        bars = [ln for ln in lines if ln.startswith("[trainer0-0] epoch 0:")]
        assert 2 <= len(bars) <= 4, bars  # the child redraws every second: not each redraw
        assert all("/30 [" in ln and " 0/30 " not in ln for ln in bars), bars
        assert lines[-1] == "[trainer0-0] after the bar"


def test_bar_view_redraws_in_place_on_a_terminal():
    console = io.StringIO()
    view = BarView(console, tty=True, every_s=0.2)
    assert view.show("[t] 1/4", echo=True) == []  # a bar that may be over in a moment
    time.sleep(0.25)
    assert view.show("[t] 2/4", echo=True) == ["[t] 2/4"]  # it ran 0.2 s: logged
    assert view.show("[t] 3/4", echo=True) == []  # within 0.2 s of the last: drawn only
    view.line("[t] a log line")
    assert view.show("", echo=True) == ["[t] 3/4"]  # the bar ends: its last state is logged
    assert console.getvalue() == (
        f"{CLEAR_LINE}[t] 1/4{CLEAR_LINE}[t] 2/4{CLEAR_LINE}[t] 3/4"
        f"{CLEAR_LINE}[t] a log line\n{CLEAR_LINE}[t] 3/4{CLEAR_LINE}"
    )
    assert view.show("[t] 0/9", echo=True) == [] and view.show("", echo=True) == []  # brief


def test_bar_lines_turn_redraws_into_lines():
    out = io.StringIO()
    plain = BarLines(out, mark=False)
    plain.write("\r3/10 [00:01<00:02]   ")
    plain.write("\r")  # tqdm's clear on close: nothing to log
    marked = BarLines(out)
    marked.write("\r4/10")
    marked.write("\r")
    assert out.getvalue() == f"3/10 [00:01<00:02]\n{PROGRESS_MARK}4/10\n{PROGRESS_MARK}\n"


def test_child_failure_is_one_line_naming_error_and_log(tmp_path):
    """The culprit's exception type and message, and its log, in one line; the traceback is
    in the log, not on the console."""
    echo = io.StringIO()
    with redirect_stdout(echo), pytest.raises(JobFailed) as info:
        run_procs([_spec("trainer0-0", FAILING_CHILD)], tmp_path / "logs", echo=["trainer0-0"])
    log_path = tmp_path / "logs" / "trainer0-0.log"
    assert str(info.value) == (
        f"trainer0-0 failed (exit code 1): ValueError: bad checkpoint; log {log_path}"
    )
    assert "Traceback (most recent call last):" in log_path.read_text()
    shown = echo.getvalue()
    assert "started" in shown and "Traceback" not in shown and 'File "' not in shown


def test_worker_error_line_is_the_culprit():
    tail = ["Traceback (most recent call last):", "  File x", "RuntimeError: a", "b"]
    err = JobFailed("trainer0-0", 1, [*tail, "trainer0-0: error: RuntimeError: a"], Path("l"))
    assert err.culprit == "trainer0-0 failed (exit code 1): RuntimeError: a"
    assert "\n" not in str(err)


def test_failed_sweep_job_is_a_row_with_its_reason_and_report_shows_it(tmp_path):
    """Job 1 resumes from a corrupt checkpoint: the sweep ends with its table (the failed row
    carries the reason) and one line, no traceback; `report` shows the same rows, error and
    time; job 0, one process, has its result.json like a distributed job."""
    from tests.helpers.jobs import run_app

    sweep = tmp_path / "sweep"
    (sweep / "1" / "checkpoints").mkdir(parents=True)
    (sweep / "1" / "checkpoints" / "last.pt").write_text("not a checkpoint")
    args = ("+experiment=smoke", "train.epochs=1", "train.resume=true", f"output_dir={tmp_path}")
    proc = run_app(
        "-m", *args, "model.hidden_channels=32,64", f"hydra.sweep.dir={sweep}", timeout=600
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "Error executing job" not in out
    assert "sweep failed: 1 of 2 jobs failed (see the table)" in proc.stdout
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("| 1 "))
    assert "FAILED" in row and "CheckpointError: " in row, row
    assert "Traceback" in (sweep / "1" / "traceback.log").read_text()
    assert "test_acc" in (sweep / "0" / "result.json").read_text()

    report = run_app("report", str(sweep), "--format", "csv", timeout=120)
    assert report.returncode == 0, report.stderr
    rows = {ln.split(",")[0]: ln for ln in report.stdout.splitlines()[1:]}
    assert "FAILED" in rows["1"] and "CheckpointError: " in rows["1"]
    first = next(ln for ln in proc.stdout.splitlines() if ln.startswith("| 0 "))
    cells = [c.strip() for c in first.split("|")]
    assert f"{float(rows['0'].split(',')[-3]):.2f}" in cells  # the sweep table's time_s
