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

