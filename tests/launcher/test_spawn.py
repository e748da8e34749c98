"""Spawning and watching real child processes: logs, failure reports, cleanup without orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from app.launch.plan import ProcSpec
from app.launch.spawn import JobFailed, run_procs
from app.runtime import Runtime
from tests.helpers.jobs import default_sigint


def _spec(name: str, code: str, pid_dir: Path) -> ProcSpec:
    """A child running `code` after writing its pid to `<pid_dir>/<name>.pid`."""
    prelude = f"import os, sys, time, signal\nopen({str(pid_dir / name)!r} + '.pid', 'w').write(str(os.getpid()))\n"
    rt = Runtime("trainer", 0, 1, 0, 1, -1, 0, "127.0.0.1", 1, 2, "", "", "")
    return ProcSpec(name, "trainer", 0, "127.0.0.1", [sys.executable, "-c", prelude + code], {}, rt)


def _pids(pid_dir: Path) -> list[int]:
    return [int(p.read_text()) for p in pid_dir.glob("*.pid") if p.read_text()]


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.dist
def test_success_writes_prefixed_logs_and_echoes(tmp_path, capsys):
    specs = [
        _spec("a", "print('hello'); print('bar 50%', end='\\r'); print('bar 100%')", tmp_path),
        _spec("b", "print('from b', file=sys.stderr)", tmp_path),
    ]
    run_procs(specs, tmp_path / "logs", echo=["a"], timeout_s=30)
    assert (tmp_path / "logs" / "a.log").read_text().splitlines() == [
        "[a] hello",
        "[a] bar 100%",  # `bar 50%\r`: a bar state gone in a moment is not a log line
    ]
    assert (tmp_path / "logs" / "b.log").read_text() == "[b] from b\n"
    out = capsys.readouterr().out
    assert "[a] hello\n[a] bar 100%\n" in out  # not a terminal: whole lines only
    assert "from b" not in out


@pytest.mark.dist
def test_first_failure_stops_siblings_and_reports_tail(tmp_path):
    specs = [
        _spec("sleeper", "time.sleep(60)", tmp_path),
        _spec(
            "crasher",
            "[print(f'line {i}') for i in range(30)]; time.sleep(0.3); sys.exit(3)",
            tmp_path,
        ),
    ]
    t0 = time.monotonic()
    with pytest.raises(JobFailed) as info:
        run_procs(specs, tmp_path / "logs", shutdown_timeout_s=5, timeout_s=30)
    assert time.monotonic() - t0 < 10
    err = info.value
    assert (err.name, err.returncode) == ("crasher", 3)
    assert err.tail[-1] == "line 29" and len(err.tail) == 20
    # the tail is kept; its last line, not an error line, is not given as the reason
    assert str(err).startswith("crasher failed (exit code 3); log ") and "line 29" not in str(err)
    assert _alive(_pids(tmp_path)) == []


@pytest.mark.dist
def test_sigterm_ignoring_child_is_killed_after_grace(tmp_path):
    specs = [
        _spec(
            "stubborn", "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)", tmp_path
        ),
        _spec("crasher", "time.sleep(0.5); os.kill(os.getpid(), signal.SIGKILL)", tmp_path),
    ]
    t0 = time.monotonic()
    with pytest.raises(JobFailed, match=r"crasher failed \(killed by signal 9\)"):
        run_procs(specs, tmp_path / "logs", shutdown_timeout_s=1.0, timeout_s=30)
    assert time.monotonic() - t0 < 8
    assert _alive(_pids(tmp_path)) == []


@pytest.mark.dist
def test_grandchildren_in_the_group_are_stopped(tmp_path):
    grandchild = (
        "import subprocess; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(tmp_path / 'grand.pid')!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    specs = [
        _spec("parent", grandchild, tmp_path),
        _spec("crasher", "time.sleep(1.0); sys.exit(1)", tmp_path),
    ]
    with pytest.raises(JobFailed):
        run_procs(specs, tmp_path / "logs", shutdown_timeout_s=2, timeout_s=30)
    pids = _pids(tmp_path)
    assert len(pids) == 3
    assert _alive(pids) == []


@pytest.mark.dist
def test_timeout_stops_everything(tmp_path):
    specs = [_spec("slow", "time.sleep(60)", tmp_path)]
    with pytest.raises(TimeoutError, match="within 1"):
        run_procs(specs, tmp_path / "logs", shutdown_timeout_s=2, timeout_s=1)
    assert _alive(_pids(tmp_path)) == []


LAUNCHER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from tests.launcher.test_spawn import _spec
    from app.launch.spawn import run_procs
    d = Path({tmp!r})
    try:
        run_procs([_spec(f"c{{i}}", "time.sleep(60)", d) for i in range(3)], d / "logs",
                  shutdown_timeout_s=3)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
    """
)


@pytest.mark.dist
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_on_launcher_stops_children(tmp_path, sig):
    repo = str(Path(__file__).resolve().parents[2])
    code = LAUNCHER.format(repo=repo, tmp=str(tmp_path))
    launcher = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        cwd=repo,
        preexec_fn=default_sigint,
    )
    try:
        deadline = time.monotonic() + 20
        while len(_pids(tmp_path)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = _pids(tmp_path)
        assert len(pids) == 3
        t0 = time.monotonic()
        launcher.send_signal(sig)
        out, _ = launcher.communicate(timeout=15)
        assert time.monotonic() - t0 < 10
        assert launcher.returncode == 130 and "interrupted" in out
        assert _alive(pids) == []
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


@pytest.mark.dist
def test_sigkilled_launcher_leaves_no_orphans(tmp_path):
    """PDEATHSIG: children get SIGTERM when the launcher dies without cleaning up."""
    repo = str(Path(__file__).resolve().parents[2])
    code = LAUNCHER.format(repo=repo, tmp=str(tmp_path))
    launcher = subprocess.Popen([sys.executable, "-c", code], cwd=repo)
    try:
        deadline = time.monotonic() + 20
        while len(_pids(tmp_path)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = _pids(tmp_path)
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=5)
        deadline = time.monotonic() + 5
        while _alive(pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _alive(pids) == []
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


@pytest.mark.dist
def test_worker_outside_a_job_fails_with_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTGNN_")}
    out = subprocess.run(
        [sys.executable, "-m", "app.launch.worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "error: DISTGNN_ROLE is not set: this entry point is started by the distgnn launcher "
        "(python -m app ...), not directly"
    ]


@pytest.mark.dist
def test_worker_error_ends_with_one_line_after_traceback(tmp_path):
    rt = Runtime(
        "trainer",
        0,
        1,
        0,
        1,
        -1,
        0,
        "127.0.0.1",
        1,
        2,
        str(tmp_path),
        str(tmp_path / "missing.yaml"),
        "",
    )
    out = subprocess.run(
        [sys.executable, "-m", "app.launch.worker"],
        env={**os.environ, **rt.to_env()},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert "Traceback" in out.stderr
    assert lines[-1].startswith("trainer0-0: error: FileNotFoundError:")


def test_children_do_not_inherit_torchrun_identity(monkeypatch):
    from app.launch.spawn import base_env

    for key in ("RANK", "MASTER_PORT", "GROUP_RANK", "TORCHELASTIC_USE_AGENT_STORE"):
        monkeypatch.setenv(key, "1")
    env = base_env()
    assert not {"RANK", "MASTER_PORT", "GROUP_RANK", "TORCHELASTIC_USE_AGENT_STORE"} & set(env)
    assert env["PATH"] == os.environ["PATH"]
