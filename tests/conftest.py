"""Fixtures shared by the harness's own tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import FIXTURE


@pytest.fixture
def fixture_copy(tmp_path: Path) -> tuple[Path, Path]:
    """A private copy of the shipped fixture: (checkpoint_dir, source_dir)."""
    dest = tmp_path / "fx"
    shutil.copytree(FIXTURE, dest)
    return dest / "mxfp8", dest / "source"
