"""The checkpoint levels' run inputs for the shipped DFlash 2 fixture, built as the suites' fixtures build them
(qualify/run/fixtures/inputs.py), and a way to call a check's function with them as its catalogue entry says."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qualify.checkpoint.manifest import Manifest, load_manifest, read_manifest_json
from qualify.checkpoint.quant_config import QuantConfig, read_model_config, read_quant_config
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.checks.catalogue import by_id
from qualify.checks.reproduction import PlanItem
from qualify.core import Evidence
from qualify.profile import Profile, load_profile
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


@pytest.fixture(scope="session")
def checkpoint(checkpoint_dir: Path) -> Iterator[Checkpoint]:
    with Checkpoint.open(checkpoint_dir) as ckpt:
        yield ckpt


@pytest.fixture(scope="session")
def source(source_dir: Path) -> Iterator[Checkpoint]:
    with Checkpoint.open(source_dir) as ckpt:
        yield ckpt


@pytest.fixture(scope="session")
def manifest_raw(checkpoint_dir: Path) -> dict[str, Any]:
    return read_manifest_json(checkpoint_dir)


@pytest.fixture(scope="session")
def manifest(checkpoint_dir: Path) -> Manifest:
    return load_manifest(checkpoint_dir)


@pytest.fixture(scope="session")
def plan(manifest: Manifest) -> list[PlanItem]:
    return [PlanItem(t.source_name, t.action) for t in manifest.tensors]


@pytest.fixture(scope="session")
def quant_config(checkpoint_dir: Path) -> QuantConfig:
    return read_quant_config(checkpoint_dir)


@pytest.fixture(scope="session")
def model_config(checkpoint_dir: Path) -> dict[str, Any]:
    return read_model_config(checkpoint_dir)


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
