"""Fixtures shared by the harness's own tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import settings

from tests.helpers import FIXTURE

# Property tests run the same examples on every run and have no per-example deadline: a loaded
# 2-core CI machine must not turn a timing into a failure, and the harness's own verdict must not flicker.
settings.register_profile("qualify", deadline=None, derandomize=True)
settings.load_profile("qualify")



@pytest.fixture
def fixture_copy(tmp_path: Path) -> tuple[Path, Path]:
    """A private copy of the shipped fixture: (checkpoint_dir, source_dir)."""
    dest = tmp_path / "fx"
    shutil.copytree(FIXTURE, dest)
    return dest / "mxfp8", dest / "source"
