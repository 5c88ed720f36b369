"""Shared by the docker tests: an engine that answers (or a failure naming the fix), the stand-in image, helpers."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from qualify import errors
from qualify.runtime import engine
from qualify.util.ports import free_port
from tests.helpers import REPO

CANDIDATE = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="session", name="docker_client")
def docker_client_fixture() -> Any:
    try:
        return engine.docker_client()
    except errors.DockerUnavailable as exc:
        pytest.fail(f"{exc} -- the docker tests need an engine; CI installs one", pytrace=False)


@pytest.fixture(scope="session", name="standin")
def standin_fixture(docker_client: Any) -> str:
    from qualify.runtime.standin import ensure_image

    report = ensure_image(docker_client)
    if report.timings_s:
        print(f"\nstand-in image built: {report.timings_s}")
    return report.image_id


def docker_ps(label: str) -> list[str]:
    """``docker ps -a --filter label=...``, through the CLI: an independent look at what is left."""
    done = subprocess.run(["docker", "ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}"],
                          capture_output=True, text=True, check=True)
    return done.stdout.split()


def fixture_variant(tmp_path: Path, *, port: int | None = None, image: str | None = None, digest: str | None = None,
                    target_revision: str | None = None, timeout_s: int | None = None, arms: str | None = None) -> Path:
    """The fixture profile on a free port (host networking: parallel runs must not share 8000), with edits."""
    text = (REPO / "qualify" / "profiles" / "fixture.toml").read_text()
    port = port or free_port()
    text = text.replace('PORT = "8000"', f'PORT = "{port}"').replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    if image:
        text = text.replace('image = "qualify-standin:latest"', f'image = "{image}"')
    if digest:
        text = text.replace('image_digest = ""', f'image_digest = "{digest}"')
    # The target is unpinned unless a test pins it: these tests exercise the pinning checks themselves.
    pinned = 'repo = "qualify-fixtures/dflash2-tiny-target"\nrevision = "e6b7f88f172c6ab930f512d3a393cc2c273fc43c"'
    assert pinned in text, "fixture.toml's target pin moved: update tests/docker_support.py"
    text = text.replace(pinned, f'repo = "qualify-fixtures/dflash2-tiny-target"\nrevision = "{target_revision or ""}"')
    if timeout_s:
        text = text.replace("startup_timeout_s = 60", f"startup_timeout_s = {timeout_s}")
    if arms:
        text = text.replace("\n[levels]\n", f'\n[orchestration]\narms = "{arms}"\n\n[levels]\n')
    path = tmp_path / f"fixture-{uuid.uuid4().hex[:6]}.toml"
    path.write_text(text)
    return path
