"""Tests for qualify.runtime.engine: without a Docker engine the message names the install script."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify import errors
from qualify.runtime import engine


def test_docker_unavailable_names_the_install_script(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    with pytest.raises(errors.DockerUnavailable) as info:
        engine.docker_client(timeout=2)
    assert "scripts/install-docker.sh" in str(info.value)
    assert "no Docker engine answers" in str(info.value)

