"""Redaction, in one place: every text that leaves the process goes through `redact_text`.

Sinks: the run name (and so MLflow's `mlflow.runName` tag and `mlflow_run.json`), MLflow
params and tags (the `overrides` tag too), text artifacts (config.yaml, overrides.yaml, the
uploaded child logs), the launcher's console echo and log files, the run summary printed at
the end. Redaction comes first, before any other change to the text (the run name drops
spaces only afterwards), so a secret is never split into pieces no rule recognises.

Text is read by parsing, not by patterns that stop at some character: each line is split into
shell words (`shell_words`: quotes group blanks, so `-p 'a b'` is one secret), and a secret
found in a word's value is masked in place (`***`), quotes and the rest of the line kept:

- URL userinfo, up to the LAST `@` of the URL: `http://u:p@ss@h` -> `http://***@h`;
- query parameters named like a secret: `?token=…`, `&key=…`, `&client_secret=…`;
- flags whose value is a secret: `sshpass -p PW` / `-pPW`, `--password PW`, `--password=PW`,
  `--token`, `--passphrase`, ssh's `-i KEYFILE`, ssh_config's `IdentityFile KEYFILE`;
- values of keys named like a secret (`secret_key`): `key=value`, `key: value`, `"key": "v"`,
  headers (`Authorization: Bearer T` keeps the scheme, `X-Api-Key: T`), `SSHPASS=PW`;
- a word holding several (a quoted override `ssh_cmd="sshpass -p 'a b' ssh"`) is read again
  as a line of its own.

YAML and JSON files are parsed, and each string is redacted with its key (`redact`), so their
own quoting (YAML's `''`) cannot hide a secret. Masking is by form, not by knowing the secret,
so a password nobody configured here (one in a URL a user typed) is masked as well.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.tracking.shell_words import Word, words

MASK = "***"
# A key is secret when it holds one of these anywhere (`db_password`, `MLFLOW_TRACKING_TOKEN`)...
_SECRET_WORDS = re.compile(
    r"password|passwd|passphrase|secret|token|api_?key|access_?key|private_?key|credential",
    re.IGNORECASE,
)
# ... or has one of these as a part of its own (`auth=`, `X-Api-Key`, `IdentityFile`, `-pass`).
_SECRET_PARTS = frozenset({"pwd", "pass", "auth", "authorization", "sshpass", "cookie", "apikey"})
_SECRET_PAIRS = frozenset({("api", "key"), ("identity", "file")})
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_KEY = re.compile(r"[-+~]*[\w.-]+")  # `--password`, `cluster.password`, `X-Api-Key`
AUTH_SCHEMES = frozenset({"bearer", "basic", "digest", "token", "negotiate", "ntlm", "apikey"})
_URL = re.compile(r"[A-Za-z][\w+.-]*://")
_QUERY = re.compile(r"[?&;]([\w.-]+)=([^&#\s]*)")
_PUNCT = set(",;:}])")
# Every form above holds one of these: a line without any is returned as it is, unparsed.
_MAYBE = re.compile(
    r"pass|pwd|secret|token|key|auth|credential|cookie|identity|bearer|://[^\s]*@"
    r"|(?:^|[\s'\"=])-i",
    re.IGNORECASE,
)


def secret_key(name: str) -> bool:
    """Whether a key or flag name (`db.password`, `--token`, `X-Api-Key`, `auth`) names a secret."""
    name = name.lstrip("-+~{[(,").rsplit(".", 1)[-1]
    if _SECRET_WORDS.search(name):
        return True
    parts = [p.lower() for p in _PARTS.findall(name)]
    if parts == ["key"]:  # `?key=…`
        return True
    return any(p in _SECRET_PARTS for p in parts) or any(
        pair in _SECRET_PAIRS for pair in zip(parts, parts[1:], strict=False)
    )


def _mask(spans: list[tuple[int, int]], w: Word, start: int) -> None:
    """Add the line span of `w.value[start:]` to `spans`; when only punctuation follows the
    quoted segment where it starts (`"v",` in JSON), that segment alone."""
    end = len(w.value)
    if start >= end:
        return
    seg = w.seg[start]
    j = next((i for i in range(start, end) if w.seg[i] != seg), end)
    if j < end and all(c in _PUNCT for c in w.value[j:]):
        end = j
    spans.append((w.pos[start], w.pos[end - 1] + 1))


def _flag(w: Word, spans: list[tuple[int, int]]) -> tuple[bool, bool]:
    """Rules on one word: masks its secret part into `spans`; returns (the next word is a
    secret, an auth scheme word before it is kept)."""
    v = w.value
    if v in ("-i", "--identity") or v.lower() in ("bearer", "identityfile"):
        return True, False  # ssh's key file, a bearer token
    if v.startswith("-") and "=" not in v and secret_key(v):
        return True, False
    if v.startswith("-i") and v[2:3] in ("/", "~", ".", "$"):
        _mask(spans, w, 2)
        return False, False
    if v.endswith(":") and _KEY.fullmatch(v[:-1].lstrip("{[(,")) and secret_key(v[:-1]):
        return True, "auth" in v.lower()  # `Authorization: Bearer T`, `password: x`
    for sep in ("=", ":"):
        key, found, value = v.partition(sep)
        if found and value[:1].isspace():  # `Authorization: Bearer T` quoted: read as a line
            break
        if found and _KEY.fullmatch(key.lstrip("{[(,")) and secret_key(key):
            _mask(spans, w, len(key) + 1)
            return value.lower() in AUTH_SCHEMES, False  # `Authorization=Bearer T`
    return False, False


def _inside(w: Word) -> list[tuple[int, int]]:
    """URL userinfo and query secrets in the word, and what the word holds as a line."""
    v, spans = w.value, []
    for m in _URL.finditer(v):
        a = m.end()
        if a >= len(v) or v[a] == "/":  # `file:///…`: no authority
            continue
        end = next((i for i in range(a, len(v)) if v[i].isspace()), len(v))
        at = v.rfind("@", a, end)  # userinfo runs to the LAST @: a password may hold one
        if at > a:
            spans.append((w.pos[a], w.pos[at - 1] + 1))
    for m in _QUERY.finditer(v):
        if m.group(2) and secret_key(m.group(1)):
            spans.append((w.pos[m.start(2)], w.pos[m.end(2) - 1] + 1))
    if any(c.isspace() for c in v):  # a quoted phrase: read it as a line of its own
        spans += [(w.pos[s], w.pos[e - 1] + 1) for s, e in _spans(v)]
    return spans


def _spans(line: str) -> list[tuple[int, int]]:
    """Spans of `line` that hold a secret."""
    spans: list[tuple[int, int]] = []
    pending = scheme = sshpass = skip = False
    for w in words(line):
        v = w.value
        if pending:  # the value of a secret flag or key
            if scheme and v.lower() in AUTH_SCHEMES:
                scheme = False
                continue
            _mask(spans, w, 0)
            pending = scheme = False
            continue
        if sshpass:  # sshpass's own options, up to the command it runs
            if skip:
                skip = False
                continue
            if v == "-p" or (v.startswith("-p") and len(v) > 2):
                if v == "-p":
                    pending = True
                else:
                    _mask(spans, w, 2)
                continue
            skip = v in ("-f", "-d", "-P")
            sshpass = v.startswith("-")
        sshpass = sshpass or v.rsplit("=", 1)[-1].rsplit("/", 1)[-1] == "sshpass"
        pending, scheme = _flag(w, spans)
        spans += _inside(w)
    return spans


def _masked(line: str) -> str:
    if not _MAYBE.search(line):
        return line
    spans = sorted(_spans(line))
    if not spans:
        return line
    out, last = [], 0
    for start, end in spans:
        if end <= last:
            continue
        start = max(start, last)
        if start > last:
            out.append(line[last:start])
        if not out or out[-1] != MASK:
            out.append(MASK)
        last = end
    out.append(line[last:])
    return "".join(out)


def redact_text(text: str) -> str:
    """`text` with every credential form above replaced by ***, line by line."""
    return "\n".join(_masked(line) for line in text.split("\n"))


def redact(key: str, value: str) -> str:
    """A param or tag value: *** whole when its key names a secret, else `redact_text`."""
    if secret_key(key.rsplit(".", 1)[-1]) and value not in ("", "None"):
        return MASK
    return redact_text(value)


_OVERRIDE = re.compile(r"[+~]{0,2}([\w.@/-]+)=")


def redact_override(override: str) -> str:
    """A Hydra override `key=value`: its whole value masked when the key names a secret (an
    unquoted value may hold blanks), else `redact_text`."""
    m = _OVERRIDE.match(override)
    if m and secret_key(m.group(1)) and override[m.end() :]:
        return override[: m.end()] + MASK
    return redact_text(override)


def redact_tags(tags: dict[str, object]) -> dict[str, str]:
    """Every tag value through `redact`."""
    return {k: redact(k, str(v)) for k, v in tags.items()}


def redact_data(data: Any, key: str = "") -> Any:
    """Parsed YAML / JSON with every string through `redact` (under its key)."""
    if isinstance(data, dict):
        return {k: redact_data(v, str(k)) for k, v in data.items()}
    if isinstance(data, list):
        return [redact_data(v, key) for v in data]
    if isinstance(data, str):  # a list's strings: Hydra's overrides
        return redact(key, data) if key else redact_override(data)
    return data


TEXT_SUFFIXES = (".yaml", ".yml", ".log", ".txt", ".json", ".cfg", ".ini", ".md")


def _parsed(path: Path, text: str) -> Any:
    """A YAML or JSON file's data (a dict or list), else None: then it is read as lines."""
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            return None
    except ValueError:  # yaml.YAMLError and json's errors are ValueErrors
        return None
    return data if isinstance(data, dict | list) else None


def redact_file_text(path: Path, text: str) -> str:
    """A file's text redacted: YAML and JSON parsed (each string with its key), else by line."""
    data = _parsed(path, text)
    if data is None:
        return redact_text(text)
    if path.suffix == ".json":
        return json.dumps(redact_data(data), indent=1)
    import yaml

    return yaml.safe_dump(redact_data(data), sort_keys=False, allow_unicode=True)


def holds_secret(path: Path, text: str) -> bool:
    """Whether redacting the file would mask anything."""
    data = _parsed(path, text)
    return redact_text(text) != text if data is None else redact_data(data) != data


def _copy_redacted(src: Path, dst: Path) -> None:
    if src.suffix not in TEXT_SUFFIXES:
        shutil.copyfile(src, dst)
        return
    text = src.read_text(encoding="utf-8", errors="replace")
    dst.write_text(redact_file_text(src, text), encoding="utf-8")


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


def restrict_secret_files(paths: Iterable[Path]) -> list[Path]:
    """Make the files among `paths` that hold a secret readable by their owner only (0600):
    a job's config.yaml and Hydra's files keep the real values, for the children to use.
    Returns the files restricted."""
    restricted = []
    for path in paths:
        try:
            if holds_secret(path, path.read_text(encoding="utf-8", errors="replace")):
                path.chmod(stat.S_IRUSR | stat.S_IWUSR)
                restricted.append(path)
        except OSError:
            continue
    return restricted


def restrict_job_files(job_dir: Path) -> list[Path]:
    """`restrict_secret_files` over a job dir's config.yaml and Hydra's `.hydra/*.yaml`."""
    job_dir = Path(job_dir)
    return restrict_secret_files([job_dir / "config.yaml", *sorted(job_dir.glob(".hydra/*.yaml"))])
