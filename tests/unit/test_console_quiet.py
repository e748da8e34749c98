"""No silent minute: what the launcher says while its children are quiet, a ticking stage, the
running loss on the bar, and a failure line that never starts after a drawn bar."""

from __future__ import annotations

import io
import logging
import time

import torch

from app.launch.console import Heard, JobConsole, Quiet
from app.launch.interrupt import say_outcome
from app.task.metrics import EpochStats
from app.tracking.progress import stage
from app.tracking.progress_lines import CLEAR_LINE, BarView
from app.train.loop import _running_loss


def _child(name: str, heard: Heard, running: bool = True, last: str = "") -> Quiet:
    return Quiet(name, heard, lambda: running, lambda: last)


def test_job_console_counts_processes_up_then_names_what_it_waits_for():
    a, b = Heard(), Heard()
    console = JobConsole([_child("trainer0-0", a, last="epoch 1: loss=2.3"), _child("s", b)], 0.0)
    assert console.state_line(1.0) == ""  # quiet for less than QUIET_S
    assert console.state_line(5.0) == "starting 2 processes: 0 of 2 up (importing torch) ... 5 s"
    a.line(echoed=True)
    b.line(echoed=False)
    assert console.state_line(6.0) == "2 of 2 processes up after 6 s"
    a.echoed_at = 100.0  # the console heard trainer0-0 at 100 s: not quiet until 104 s
    assert console.state_line(103.0) == ""
    line = console.state_line(104.5)
    assert line.startswith("waiting for trainer0-0, s ... 104 s")
    assert line.endswith("trainer0-0 last said: epoch 1: loss=2.3")


def test_a_stage_says_what_it_does_and_ticks_while_it_runs(caplog, monkeypatch):
    from app.tracking import progress

    monkeypatch.setattr(progress, "TICK_S", 0.2)
    with caplog.at_level(logging.INFO, logger="distgnn"), stage("closing MLflow run r1"):
        time.sleep(0.5)
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == "closing MLflow run r1"
    assert any(m.startswith("closing MLflow run r1 ... ") for m in said[1:]), said


def test_a_failure_line_starts_on_its_own_line_below_a_drawn_bar(capsys):
    tty = io.StringIO()
    view = BarView(tty, tty=True)
    view.show("[trainer0-0] train 3/10", echo=True)
    say_outcome(RuntimeError("x"), "job failed: trainer1-0 failed (exit code 1)")
    assert tty.getvalue().endswith("train 3/10" + CLEAR_LINE)  # the bar is wiped first
    assert capsys.readouterr().err == "job failed: trainer1-0 failed (exit code 1)\n"


def test_the_bar_shows_the_running_loss_of_a_cpu_epoch():
    stats = EpochStats()
    stats.add(torch.tensor(2.0), torch.tensor(1.0), 10, 5)
    stats.add(torch.tensor(1.0), torch.tensor(1.0), 30, 5)
    assert _running_loss(stats) == "loss 1.250, "
