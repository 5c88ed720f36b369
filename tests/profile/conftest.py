"""The profiles the profile tests read: the seed's, loaded, and the shipped fixture and seed TOML text."""

from __future__ import annotations

import pytest

from qualify.profile import Profile, load_profile
from tests.profile.support import PROFILES_DIR, SEED_PROFILE


@pytest.fixture(scope="module")
def seed_profile() -> Profile:
    return load_profile(SEED_PROFILE)


@pytest.fixture(scope="module")
def fixture_text() -> str:
    return (PROFILES_DIR / "fixture.toml").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def seed_profile_text() -> str:
    return (PROFILES_DIR / f"{SEED_PROFILE}.toml").read_text(encoding="utf-8")
