"""Fixtures shared by the runtime tests."""

from __future__ import annotations

import pytest

from qualify.profile import Profile, load_profile
from tests.test_profile import SEED_PROFILE


@pytest.fixture(scope="module")
def seed() -> Profile:
    """The profile of the published DFlash 2 serving command (the seed's)."""
    return load_profile(SEED_PROFILE)
