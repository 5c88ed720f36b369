"""``qualify profile-diff``: the differences between two profiles, judged against the rehearsal allow-list."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.cli import main
from tests.profile.support import PROFILES_DIR, SEED_PROFILE


def _variant(tmp_path: Path, old: str, new: str, name: str = "variant.toml") -> Path:
    text = (PROFILES_DIR / f"{SEED_PROFILE}.toml").read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path = tmp_path / name
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_the_same_profile_has_no_difference(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile-diff", SEED_PROFILE, str(PROFILES_DIR / f"{SEED_PROFILE}.toml")]) == 0
    assert capsys.readouterr().out.endswith("0 difference(s)\n")


def test_an_allowed_difference_passes_the_rehearsal_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _variant(tmp_path, 'shm_size = "32g"', 'shm_size = "2g"')
    assert main(["profile-diff", SEED_PROFILE, str(path)]) == 1  # a difference, judged by nothing
    assert "runtime.shm_size: '32g' -> '2g'\n" in capsys.readouterr().out
    assert main(["profile-diff", "--rehearsal", SEED_PROFILE, str(path)]) == 0
    out = capsys.readouterr().out
    assert "runtime.shm_size: '32g' -> '2g'  [allowed: hardware:" in out
    assert out.endswith("1 difference(s), 0 not allowed\n")


def test_an_orchestration_difference_fails_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _variant(tmp_path, '[runtime.qualification_overrides]\nCUDAGRAPH_MODE = "NONE"',
                    '[runtime.qualification_overrides]\nCUDAGRAPH_MODE = "FULL"')
    assert main(["profile-diff", "--rehearsal", SEED_PROFILE, str(path)]) == 1
    out = capsys.readouterr().out
    assert ("runtime.qualification_overrides.CUDAGRAPH_MODE: 'NONE' -> 'FULL'  "
            "[NOT ALLOWED: runtime.qualification_overrides.CUDAGRAPH_MODE]") in out
    assert out.endswith("1 difference(s), 1 not allowed\n")


def test_a_profile_that_cannot_be_loaded_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile-diff", SEED_PROFILE, "no-such-profile"]) == 2
    assert "unknown profile 'no-such-profile'" in capsys.readouterr().err
    assert main(["profile-diff", SEED_PROFILE, str(tmp_path / "missing.toml")]) == 2
    assert "missing.toml: no such file" in capsys.readouterr().err


def test_text_from_a_profile_is_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _variant(tmp_path, 'description = "1.20 GB of draft weights loaded"',
                    'description = "1.20 GB\\n\\u001b[2Jverdict: qualified"')
    assert main(["profile-diff", SEED_PROFILE, str(path)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\nverdict: qualified" not in out
    assert "-> '1.20 GB\\n\\x1b[2Jverdict: qualified'\n" in out
