"""`make typecheck`: mypy on app/ (pyproject's `[tool.mypy]`) against a baseline that only
shrinks. `python tools/typecheck.py [--update] [mypy arguments]`.

`.mypy-baseline.txt` lists the errors app/ had when the checker came in, one per line as
`path: error: message  [code]` (line numbers dropped, so editing a file does not move its
entries). The check fails on any error not in the baseline (new code is checked in full; the
engine's seams are strict, see pyproject) and on any baseline entry that no longer occurs
(a fixed error is taken off, so the list only shrinks): `--update` rewrites the baseline to
what mypy reports now, for exactly that case.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / ".mypy-baseline.txt"
_LINE = re.compile(r"^(?P<path>[^:]+):\d+(?::\d+)?: error: (?P<rest>.*)$")


def normalise(output: str) -> Counter[str]:
    """mypy's error lines without their line numbers, counted (a message may repeat)."""
    found: Counter[str] = Counter()
    for line in output.splitlines():
        m = _LINE.match(line.strip())
        if m:
            found[f"{m['path']}: error: {m['rest']}"] += 1
    return found


def compare(found: Counter[str], baseline: Counter[str]) -> tuple[list[str], list[str]]:
    """(errors not in the baseline, baseline entries no longer reported), sorted."""
    return sorted((found - baseline).elements()), sorted((baseline - found).elements())


def run_mypy(extra: list[str]) -> str:
    """mypy's report; `extra`: more mypy arguments (e.g. `--python-executable` for a mypy
    installed beside the project's environment rather than in it)."""
    cmd = [sys.executable, "-m", "mypy", "--no-error-summary", "--no-pretty", "--show-error-codes"]
    done = subprocess.run([*cmd, *extra], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):  # 2: mypy itself failed (config, crash)
        sys.exit(f"typecheck: mypy failed (exit {done.returncode}):\n{done.stderr}{done.stdout}")
    return done.stdout


def main(argv: list[str]) -> int:
    update = "--update" in argv
    found = normalise(run_mypy([a for a in argv if a != "--update"]))
    if update:
        BASELINE.write_text("".join(f"{e}\n" for e in sorted(found.elements())))
        print(f"typecheck: baseline rewritten, {sum(found.values())} errors")
        return 0
    baseline = normalise_baseline(BASELINE.read_text())
    new, fixed = compare(found, baseline)
    for e in new:
        print(f"new: {e}")
    if fixed:
        print(
            f"typecheck: {len(fixed)} baseline errors are fixed; take them off the baseline "
            "(python tools/typecheck.py --update) so it only shrinks:"
        )
        for e in fixed:
            print(f"fixed: {e}")
    if new or fixed:
        return 1
    print(f"typecheck: OK ({sum(baseline.values())} baseline errors left)")
    return 0


def normalise_baseline(text: str) -> Counter[str]:
    """The baseline file's entries, counted."""
    return Counter(line for line in text.splitlines() if line.strip())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
