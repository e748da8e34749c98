"""The launcher tests' fixtures: one smoke dataset and 2-part partition for the package."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.jobs import SMOKE, partitioned


@pytest.fixture(scope="package")
def made(tmp_path_factory) -> Path:
    """Output dir holding the smoke dataset and its 2-part partition at `<dir>/P`."""
    return partitioned(tmp_path_factory.mktemp("trust"), *SMOKE)
