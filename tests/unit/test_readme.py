"""The README is a manual: every command in it runs as written, every link resolves.

Commands are taken from the README's fenced `bash` blocks and from inline code that starts with
`.venv/bin/distgnn` or `make`, and from the `bash` blocks of docs/*.md. Cheap ones run for real
(`--cfg job`, `make help`; marked `dist`, as they start processes); every training or
partitioning command is composed and validated in this process as `distgnn` would before
starting anything (what `--cfg job` runs); a `-m` sweep is composed once per job; `distgnn
report` arguments are parsed; a make target must exist in the Makefile. A README command of
any other kind fails the test until it gets a check here.
"""

from __future__ import annotations

import ast
import functools
import itertools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.jobs import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_BYTES = 15 * 1024

# Values for the shell variables the documented commands use (SLURM's, the shell's).
SHELL_VARS = {"SLURM_NNODES": "2", "SLURM_JOB_ID": "1", "PWD": str(REPO)}
DISTGNN = ("distgnn", ".venv/bin/distgnn")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`((?:\.venv/bin/distgnn|make) [^`]*|make)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def shell_commands(text: str) -> list[str]:
    """The command lines of `text`'s fenced bash blocks, continuation lines joined."""
    lines = []
    for lang, body in FENCE.findall(text):
        if lang == "bash":
            lines += body.replace("\\\n", " ").splitlines()
    return lines


def inline_commands(text: str) -> list[str]:
    """Inline code spans that are commands (`make ...`, `.venv/bin/distgnn ...`)."""
    return INLINE.findall(FENCE.sub("", text))


def argv_of(line: str) -> list[str]:
    """`line` as the shell would pass it: comments dropped, quotes removed, variables set."""
    expanded = re.sub(r"\$(\w+)", lambda m: SHELL_VARS.get(m[1], m[0]), line)
    return shlex.split(expanded, comments=True)


def app_args(argv: list[str]) -> list[str] | None:
    """The arguments `python -m app` gets from `argv`, or None when it does not start the app
    (`distgnn`, `python -m app`, and the same under `torchrun`, `srun` or after a `--`)."""
    if "--" in argv:  # `python -m app.testbed exec h0 -- distgnn ...`
        argv = argv[argv.index("--") + 1 :]
    if argv and argv[0] in ("torchrun", "srun"):
        argv = argv[1:]
        if "-m" in argv and argv[argv.index("-m") + 1 : argv.index("-m") + 2] == ["app"]:
            return argv[argv.index("-m") + 2 :]
        while argv and argv[0].startswith("-"):  # srun's own options
            argv = argv[1:]
    if argv and argv[0] in DISTGNN:
        return argv[1:]
    if argv[:3] in ([".venv/bin/python", "-m", "app"], ["python", "-m", "app"]):
        return argv[3:]
    return None


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z0-9-]*):", text, re.M))


def sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """The override lists of every job of a `-m` sweep over `overrides` (Hydra's grammar)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    choices = []
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.get_key_element()
        if override.is_sweep_override():
            choices.append([f"{key}={v}" for v in override.sweep_string_iterator()])
        else:
            choices.append([f"{key}={override.get_value_element_as_str()}"])
    return [list(job) for job in itertools.product(*choices)]


def check_app(args: list[str]) -> None:
    """Compose and validate what `distgnn ARGS` would run, without running it."""
    from app.config import check_overrides
    from app.tracking.report import parse_args

    if args[:1] == ["report"]:
        parse_args(args[1:])
        return
    check_overrides(args)
    overrides = [a for a in args if "=" in a and not a.startswith(("-", "hydra."))]
    if not torch.cuda.is_available():  # the same config, checked here as `auto` would run it
        cuda = ("train.device=cuda", "sampler.device=cuda")
        overrides = [a.replace("=cuda", "=auto") if a in cuda else a for a in overrides]
    jobs = sweep_jobs(overrides) if {"-m", "--multirun"} & set(args) else [overrides]
    for job in jobs:
        compose_once(tuple(job))


@functools.cache
def compose_once(overrides: tuple[str, ...]) -> None:
    """Compose and validate `overrides` (the same list in two places is composed once)."""
    from app.config import compose_config

    compose_config(list(overrides))


def run_cheap(argv: list[str], timeout: float = 120) -> None:
    """Run a command that returns at once (no job starts): it must exit 0."""
    venv_bin = Path(sys.executable).parent  # where `make install` put `distgnn`
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"{shlex.join(argv)} exited {proc.returncode}: {proc.stderr[-1500:]}"
    )


def is_cheap(argv: list[str]) -> bool:
    """`make help` and `distgnn ... --cfg job`: they print and exit, nothing starts."""
    if argv[:1] == ["make"]:
        return argv[1:] in ([], ["help"])
    args = app_args(argv)
    return argv[0] in DISTGNN and args is not None and "--cfg" in args and "-m" not in args


def check_command(line: str, targets: set[str], *, strict: bool) -> str:
    """Check one command line in this process; returns how ('' when no check knows it)."""
    argv = argv_of(line)
    if not argv:
        return "comment"
    if argv[0] == "make":
        goals = [a for a in argv[1:] if "=" not in a and not a.startswith("-")]
        missing = [g for g in goals or ["help"] if g not in targets]
        assert not missing, f"{line!r}: no Makefile target {missing}"
        return "make"
    args = app_args(argv)
    if args is not None:
        if "--cfg" in args:  # `--cfg job`: validated as any other run of these overrides
            i = args.index("--cfg")
            args = args[:i] + args[i + 2 :]
        check_app(args)
        return "composed"
    assert not strict, (
        f"README command {line!r}: no check knows this command (tests/unit/test_readme.py)"
    )
    return ""


def readme_commands() -> list[str]:
    text = README.read_text()
    return shell_commands(text) + inline_commands(text)


def test_readme_is_short():
    size = len(README.read_bytes())
    assert size <= MAX_README_BYTES, f"README.md is {size} bytes; move reference or design to docs/"


def test_every_readme_command_is_valid():
    targets = make_targets()
    kinds = [check_command(line, targets, strict=True) for line in readme_commands()]
    assert kinds.count("composed") >= 10 and "make" in kinds, kinds


@pytest.mark.dist  # starts processes (one at a time, each exits at once)
def test_cheap_readme_commands_run():
    cheap = [argv for argv in map(argv_of, readme_commands()) if argv and is_cheap(argv)]
    assert any(argv[0] == "make" for argv in cheap) and any("--cfg" in a for a in cheap), cheap
    for argv in cheap:
        run_cheap(argv)


@pytest.mark.parametrize("page", sorted(DOCS.rglob("*.md")), ids=lambda p: str(p.relative_to(REPO)))
def test_docs_commands_compose(page: Path):
    targets = make_targets()
    for line in shell_commands(page.read_text()) + inline_commands(page.read_text()):
        check_command(line, targets, strict=False)


@pytest.mark.parametrize(
    "page", [README, *sorted(DOCS.rglob("*.md"))], ids=lambda p: str(p.relative_to(REPO))
)
def test_links_resolve(page: Path):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"\w+://|#|mailto:", target):
            continue
        if not (page.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert not broken, f"{page.name}: links to missing files {broken}"


def test_partition_format_lives_in_the_writer():
    """docs/partition-format.md points at the writer's docstring instead of copying it."""
    writer = REPO / "app" / "partition" / "writer.py"
    doc = ast.get_docstring(ast.parse(writer.read_text())) or ""
    for name in ("META.json", "node_map.pt", "part_<i>/graph.pt", "part_<i>/node_feats.pt"):
        assert name in doc, f"app/partition/writer.py's docstring no longer describes {name}"
    page = (DOCS / "partition-format.md").read_text()
    assert "app/partition/writer.py" in page and "part_<i>/graph.pt       {" not in page


@pytest.mark.parametrize(
    "line",
    [
        "distgnn +experiment=smok",  # no such experiment
        "distgnn +experiment=smoke train.epochz=3",  # no such key
        "distgnn -m +experiment=smoke model.num_layers=2,3 sampler.num_neighbors=[5,5]",  # one job invalid
        "distgnn report",  # neither a dir nor --experiment
        "make no-such-target",
        "rm -rf outputs",  # a README command no check knows
    ],
)
def test_a_broken_command_is_caught(line: str):
    from app.config import ConfigError

    with pytest.raises((AssertionError, ConfigError, SystemExit)):
        check_command(line, make_targets(), strict=True)
