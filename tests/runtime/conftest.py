"""Fixtures shared by the runtime tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from qualify.profile import Profile, load_profile
from qualify.runtime import labels
from tests.docker_support import docker_ps
from tests.profile.support import SEED_PROFILE


@pytest.fixture(scope="module")
def seed() -> Profile:
    """The profile of the published DFlash 2 serving command (the seed's)."""
    return load_profile(SEED_PROFILE)


@pytest.fixture(autouse=True)
def no_leaked_container(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every ``docker`` test of the runtime leaves no container of this process behind."""
    yield
    if request.node.get_closest_marker("docker") is not None:
        assert docker_ps(f"{labels.LABEL_OWNER}={labels.owner_id()}") == [], "a test left a container behind"
