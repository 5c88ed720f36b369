"""The checkpoint levels' run inputs for the shipped DFlash 2 fixture, built as the suites' fixtures build them
(qualify/run/fixtures/inputs.py), and a way to call a check's function with them as its catalogue entry says."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from qualify.checks.catalogue import by_id
from qualify.core import Evidence
from qualify.profile import Profile, load_profile

# The suites' own fixtures built from the paths below: the same code that opens a run's inputs.
from qualify.run.fixtures.inputs import (  # noqa: F401  (fixtures)
    checkpoint,
    manifest,
    manifest_raw,
    model_config,
    plan,
    quant_config,
    source,
)
from tests.helpers import FIXTURE


@pytest.fixture(scope="session")
def profile() -> Profile:
    return load_profile("fixture")


@pytest.fixture(scope="session")
def checkpoint_dir() -> Path:
    return FIXTURE / "mxfp8"


@pytest.fixture(scope="session")
def checkpoint_folder(checkpoint_dir: Path) -> Path:
    return checkpoint_dir


@pytest.fixture(scope="session")
def source_dir() -> Path:
    return FIXTURE / "source"


@pytest.fixture
def run_check(request: pytest.FixtureRequest) -> Any:
    """``run_check(check_id, **overrides)``: the check's function called with its declared inputs, as the suite
    calls it (each input this module's fixture of that name, unless overridden)."""

    def run(check_id: str, **overrides: Any) -> Evidence:
        spec = by_id(check_id)
        assert spec is not None, f"{check_id} is not in the catalogue"
        inputs = {name: overrides[name] if name in overrides else request.getfixturevalue(name)
                  for name in spec.inputs}
        result: Evidence = getattr(importlib.import_module(spec.module), spec.function)(**inputs)
        return result

    return run
