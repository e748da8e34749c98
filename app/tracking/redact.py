"""Mask values that look like credentials before they are logged as MLflow params.

Every config value becomes a param, and params are shown to anyone who opens the UI: a tracking
URI with `user:password@`, an `ssh -i KEY` option or a key named like a secret must not be.
"""

from __future__ import annotations

import re

MASK = "***"
_URI_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][\w+.-]*://[^/:@\s]+:)[^@\s]+(?=@)")
_SSH_KEY_OPTION = re.compile(r"(?P<head>(?:^|\s)-i\s*|IdentityFile[= ]\s*)\S+")
_SECRET_KEY = re.compile(r"(password|passwd|secret|token|api_key|credential)", re.IGNORECASE)


def redact(key: str, value: str) -> str:
    """`value` with passwords in URIs, ssh key paths and secret-named keys replaced by ***."""
    if _SECRET_KEY.search(key.rsplit(".", 1)[-1]) and value not in ("", "None"):
        return MASK
    value = _URI_PASSWORD.sub(lambda m: m.group("head") + MASK, value)
    return _SSH_KEY_OPTION.sub(lambda m: m.group("head") + MASK, value)
