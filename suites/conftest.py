"""Fixtures the qualification suites share: the profile, the checkpoint, its source and configs.

Each is opened once per session. A broken input fails every check that needs it, with
the file and tensor named; an input that was not given skips those checks, and a
skipped check never counts as passed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qualify.checkpoint.manifest import Manifest, load_manifest, read_manifest_json
from qualify.checkpoint.quant_config import QuantConfig, read_model_config, read_quant_config
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.profile import Profile, load_profile
from qualify.run.suite_plugin import find_plugin
from suites.runtime_fixtures import runtime, runtime_teardown, started_runtime  # noqa: F401  (fixtures)
from suites.serving_fixtures import *  # noqa: F403  (the serving levels' fixtures)


@pytest.fixture(scope="session")
def profile(request: pytest.FixtureRequest) -> Profile:
    plugin = find_plugin(request.config)
    if plugin is not None and plugin.profile is not None:
        return plugin.profile  # the run's own, parsed once (and hashed into the report)
    return load_profile(request.config.getoption("--profile") or "fixture")


@pytest.fixture(scope="session")
def checkpoint_dir(request: pytest.FixtureRequest) -> Path:
    path = request.config.getoption("--checkpoint")
    if path is None:
        pytest.skip("no --checkpoint given: there is no checkpoint to qualify")
    return Path(path)


@pytest.fixture(scope="session")
def source_dir(request: pytest.FixtureRequest) -> Path:
    path = request.config.getoption("--source")
    if path is None:
        pytest.skip("no --source given: claims about the source (checksums, coverage, statistics) cannot be verified")
    return Path(path)


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
def quant_config(checkpoint_dir: Path) -> QuantConfig:
    return read_quant_config(checkpoint_dir)


@pytest.fixture(scope="session")
def model_config(checkpoint_dir: Path) -> dict[str, Any]:
    return read_model_config(checkpoint_dir)
