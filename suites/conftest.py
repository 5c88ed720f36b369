"""Fixtures the qualification suites share: the profile, the checkpoint, its source and configs.

Each is opened once per session. A broken input fails every check that needs it, with
the file and tensor named; an input that was not given skips those checks, and a
skipped check never counts as passed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qualify.checkpoint.identity import IDENTITY_KEYS, SourcePins
from qualify.checkpoint.manifest import Manifest, load_manifest, read_manifest_json
from qualify.checkpoint.pinned import PinnedFolder
from qualify.checkpoint.quant_config import QuantConfig, read_model_config, read_quant_config
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.checks.source_identity import check_source_identity
from qualify.errors import CheckpointError, SourceIdentityError
from qualify.profile import Profile, load_profile
from qualify.report.model import SOURCE_NOT_VERIFIED, Evidence
from qualify.run.suite_plugin import checkpoint_path, find_plugin
from suites.runtime_fixtures import runtime, runtime_teardown, serving_runtime, started_runtime  # noqa: F401  (fixtures)
from suites.serving_fixtures import *  # noqa: F403  (the serving levels' fixtures)


@pytest.fixture(scope="session")
def profile(request: pytest.FixtureRequest) -> Profile:
    plugin = find_plugin(request.config)
    if plugin is not None and plugin.profile is not None:
        return plugin.profile  # the run's own, parsed once (and hashed into the report)
    return load_profile(request.config.getoption("--profile") or "fixture")


@pytest.fixture(scope="session")
def checkpoint_dir(request: pytest.FixtureRequest) -> Path:
    # The run's pinned copy: the bytes the report and the attestation name (qualify.checkpoint.pinned).
    path = checkpoint_path(request.config)
    if path is None:
        pytest.skip("no --checkpoint given: there is no checkpoint to qualify")
    return path


@pytest.fixture(scope="session")
def checkpoint_folder(request: pytest.FixtureRequest, checkpoint_dir: Path) -> Path:
    """The folder as the user named it (what a release uploads): for the checks of its paths and links alone,
    since its bytes may change under the run; the checks of content read ``checkpoint_dir``."""
    plugin = find_plugin(request.config)
    return plugin.pinned.origin if plugin is not None and plugin.pinned is not None else checkpoint_dir


@pytest.fixture(scope="session")
def pinned_checkpoint(request: pytest.FixtureRequest) -> PinnedFolder:
    plugin = find_plugin(request.config)
    if plugin is None or plugin.pinned is None:
        pytest.skip("the checkpoint was not pinned by a qualification run: nothing shows the checks read one set of "
                    "bytes")
    return plugin.pinned


@pytest.fixture(scope="session")
def source_identity(request: pytest.FixtureRequest, profile: Profile) -> Evidence:
    """Whether the --source folder is proven to be the profile's pinned source; recorded in the run's report."""
    path = request.config.getoption("--source")
    if path is None:
        pytest.skip("no --source given: claims about the source (checksums, coverage, statistics) cannot be verified")
    ev = check_source_identity(Path(path), repo=profile.source_repo, revision=profile.source_revision,
                       pins=SourcePins(profile.source_content_revision, profile.source_sha256),
                       trust=bool(request.config.getoption("--trust-local-source")))
    plugin = find_plugin(request.config)
    if plugin is not None:
        record = {k: ev.measured[k] for k in IDENTITY_KEYS}
        checkpoint = checkpoint_path(request.config)
        with contextlib.suppress(CheckpointError):
            source = read_manifest_json(Path(checkpoint)).get("source") if checkpoint is not None else None
            if isinstance(source, dict):
                record.update(manifest_repo=_text(source.get("repo")), manifest_revision=_text(source.get("revision")))
        plugin.run.source["identity"] = record
    return ev


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@pytest.fixture(scope="session")
def source_dir(request: pytest.FixtureRequest, source_identity: Evidence) -> Path:
    # Every check that reads the source needs its identity proven first: a different model with a
    # manifest that agrees with it would otherwise pass every one of them.
    if not source_identity.ok:
        first = source_identity.findings[0]
        message = first.message
        if not message.startswith(SOURCE_NOT_VERIFIED):
            message = f"{SOURCE_NOT_VERIFIED}: {message}"
        raise SourceIdentityError(message, file=first.file)
    return Path(request.config.getoption("--source"))


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
