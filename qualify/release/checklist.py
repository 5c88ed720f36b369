"""The checks each level consists of, as the check catalogue declares them.

A release policy must know which checks a level *is*: a report or attestation that
lists a check the harness never had, or leaves one out, cannot speak for that level.
The one definition is :mod:`qualify.checks.catalogue`, from which the suites are
generated (the harness's tests hold the suites pytest collects to it); it imports
nothing heavy, so the gate never loads torch or a suite fixture.
"""

from __future__ import annotations

from qualify.checks import catalogue


def level_checks() -> dict[str, tuple[str, ...]]:
    """Every level's check ids, in run order, as this harness defines them."""
    return catalogue.level_checks()


def level_of_check(check_id: str) -> str | None:
    """The level a check id names (its prefix), or None when the prefix is no level."""
    return catalogue.level_of_check(check_id)
