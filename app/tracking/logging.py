"""Rank-aware logging: every record says which process wrote it, e.g. `[trainer0.1]`.

`setup_logging` is called once per process (by the entry point of each role). It replaces the
handlers it installed before (so calling it again is harmless) and leaves other handlers, such
as Hydra's in the launching process, alone.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

FORMAT = "[%(process_name)s] %(asctime)s %(levelname).1s %(name)s: %(message)s"
DATEFMT = "%H:%M:%S"
_OURS = "_distgnn_handler"


class _ProcessName(logging.Filter):
    """Adds `record.process_name` (role + rank) to every record passing the handler."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.process_name = name

    def filter(self, record: logging.LogRecord) -> bool:
        record.process_name = self.process_name
        return True


def setup_logging(
    name: str = "main",
    level: int | str = logging.INFO,
    log_dir: str | os.PathLike | None = None,
) -> logging.Logger:
    """Log to stderr (and to `<log_dir>/<name>.log` if given) with a `[name]` prefix.

    `name` is the process identity, normally `Runtime.name` (`trainer0.0`, `sampler1.0.2`).
    Returns the project's root logger `distgnn`.
    """
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, _OURS, False)]:
        root.removeHandler(handler)
        handler.close()
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_dir is not None:
        path = Path(log_dir) / f"{name}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(path, encoding="utf-8"))
    for handler in handlers:
        handler.setFormatter(logging.Formatter(FORMAT, DATEFMT))
        handler.addFilter(_ProcessName(name))
        setattr(handler, _OURS, True)
        root.addHandler(handler)
    root.setLevel(level)
    return logging.getLogger("distgnn")
