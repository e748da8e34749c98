"""Redaction, in one place: every text that leaves the process goes through `redact_text`.

Sinks: MLflow params and tags (the `overrides` tag too), text artifacts (config.yaml,
overrides.yaml, the uploaded child logs), the launcher's console echo and log files, the run
summary printed at the end. Forms masked (each by `***`):

- userinfo in any URL: `http://user:pw@h`, `http://TOKEN@h`, `http://:pw@h` -> `http://***@h`;
- query parameters named like a secret: `?token=…`, `&api_key=…`, `password=`, `secret=`;
- `sshpass -p PW` (and `-pPW`, `SSHPASS=PW`), ssh's `-i KEYFILE` and `IdentityFile KEYFILE`;
- values of keys named like a secret (`password`, `secret`, `token`, `api_key`, `credential`):
  a param `x.password`, and `key=value` / `key: value` in text.

Masking is by form, not by knowing the secret, so a password nobody configured here (one in a
URL a user typed) is masked as well.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MASK = "***"
_SECRET_WORDS = r"(?:password|passwd|pwd|secret|token|api_?key|access_?key|credential)"
_SECRET_KEY = re.compile(_SECRET_WORDS, re.IGNORECASE)
_RULES = [
    # scheme://userinfo@ : everything between `//` and `@` before the host
    (re.compile(r"(?P<head>\b[a-zA-Z][\w+.-]*://)[^/@\s?#'\"]*@"), r"\g<head>" + MASK + "@"),
    # ?token=… &key=… (any parameter whose name holds a secret word, or is just `key`)
    (
        re.compile(
            r"(?P<head>[?&;](?:[\w.-]*" + _SECRET_WORDS + r"[\w.-]*|key)=)[^&#\s'\"]*", re.I
        ),
        r"\g<head>" + MASK,
    ),
    (re.compile(r"(?P<head>\bsshpass\b(?:\s+-[^p\s]\S*)*\s+-p\s*)\S+"), r"\g<head>" + MASK),
    (re.compile(r"(?P<head>\bSSHPASS=)\S+"), r"\g<head>" + MASK),
    (re.compile(r"(?P<head>(?:^|(?<=[\s'\"=]))-i(?:\s+|(?=[/~.$])))[^\s'\"]+"), r"\g<head>" + MASK),
    (re.compile(r"(?P<head>\bIdentityFile[= ]\s*)[^\s'\"]+", re.I), r"\g<head>" + MASK),
    # key=value / key: value where the key names a secret (overrides, YAML, log lines)
    (
        re.compile(
            r"(?P<head>(?<![\w/-])[\w.-]*" + _SECRET_WORDS + r"[\w-]*\s*(?:=|:\s)\s*['\"]?)"
            r"(?!\*\*\*)[^\s'\",&]+",
            re.I,
        ),
        r"\g<head>" + MASK,
    ),
]
TEXT_SUFFIXES = (".yaml", ".yml", ".log", ".txt", ".json", ".cfg", ".ini", ".md")


def redact_text(text: str) -> str:
    """`text` with every credential form above replaced by ***."""
    for pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    return text


def redact(key: str, value: str) -> str:
    """A param or tag value: *** whole when its key names a secret, else `redact_text`."""
    if _SECRET_KEY.search(key.rsplit(".", 1)[-1]) and value not in ("", "None"):
        return MASK
    return redact_text(value)


def redact_tags(tags: dict[str, object]) -> dict[str, str]:
    """Every tag value through `redact`."""
    return {k: redact(k, str(v)) for k, v in tags.items()}


def _copy_redacted(src: Path, dst: Path) -> None:
    if src.suffix not in TEXT_SUFFIXES:
        shutil.copyfile(src, dst)
        return
    text = src.read_text(encoding="utf-8", errors="replace")
    dst.write_text(redact_text(text), encoding="utf-8")


@contextmanager
def redacted_copy(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary copy of file or folder `path` with its text files redacted, same name, to
    upload as an artifact (the original on local disk is left as it is)."""
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="distgnn-redacted-") as tmp:
        out = Path(tmp) / path.name
        if path.is_dir():
            for src in sorted(path.rglob("*")):
                if src.is_file():
                    dst = out / src.relative_to(path)
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    _copy_redacted(src, dst)
            out.mkdir(exist_ok=True)
        else:
            _copy_redacted(path, out)
        yield out
