"""Tests for qualify.runtime.standin's pure parts: the stand-in image is identified by what it is made of
(its base and every file of its build context), its cached rootfs by its recipe, and its command-line
entry point fails in one line, never a traceback. (Real stand-in containers: tests/runtime/test_container.py.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from qualify.errors import HarnessError
from qualify.runtime import standin


def test_the_cache_folder_follows_qualify_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUALIFY_CACHE", str(tmp_path))
    assert standin.cache_dir() == tmp_path
    tarball = standin.rootfs_tarball()
    assert tarball.parent == tmp_path and standin.recipe_key() in tarball.name
    monkeypatch.delenv("QUALIFY_CACHE")
    assert standin.cache_dir() == Path.home() / ".cache" / "qualify"


def test_a_changed_recipe_names_another_rootfs(monkeypatch: pytest.MonkeyPatch) -> None:
    key = standin.recipe_key()
    assert len(key) == 12 and key == standin.recipe_key()
    monkeypatch.setattr(standin, "INCLUDE", ("python3", "curl"))
    assert standin.recipe_key() != key
    monkeypatch.undo()
    monkeypatch.setattr(standin, "ROOTFS_RECIPE", standin.ROOTFS_RECIPE + 1)
    assert standin.recipe_key() != key


def test_the_source_digest_covers_the_base_and_every_context_file(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    context = tmp_path / "standin"
    shutil.copytree(standin.CONTEXT_DIR, context)
    monkeypatch.setattr(standin, "CONTEXT_DIR", context)
    base = "sha256:" + "a" * 64
    digest = standin.source_digest(base)
    assert len(digest) == 64 and digest == standin.source_digest(base)
    assert standin.source_digest("sha256:" + "b" * 64) != digest
    first = next(p for p in sorted(context.iterdir()) if p.is_file())
    first.write_bytes(first.read_bytes() + b"\n")
    assert standin.source_digest(base) != digest
    (context / "extra.txt").write_text("x")
    changed = standin.source_digest(base)
    (context / "extra.txt").unlink()
    assert standin.source_digest(base) != changed


def test_a_harness_error_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    def fails() -> int:
        raise HarnessError("debootstrap is not installed", hint="run scripts/install-docker.sh")

    with pytest.raises(SystemExit) as info:
        standin.run_main(fails, "qualify.runtime.standin")
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err == "qualify.runtime.standin: debootstrap is not installed (run scripts/install-docker.sh)\n"
    with pytest.raises(SystemExit) as ok:
        standin.run_main(lambda: 0, "qualify.runtime.standin")
    assert ok.value.code == 0


def test_a_build_report_says_what_was_made(capsys: pytest.CaptureFixture[str]) -> None:
    report = standin.BuildReport("qualify-standin:latest", "sha256:" + "c" * 64, {"rootfs": 1.5}, ["rootfs"])
    standin.print_build(report, 0.0)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"qualify-standin:latest sha256:{'c' * 64}"
    assert out[1] == "  rootfs: 1.5 s"
    assert out[2].startswith("  built: rootfs; total ")
    standin.print_build(standin.BuildReport("i", "d"), 0.0)
    assert "built: nothing (cached)" in capsys.readouterr().out
