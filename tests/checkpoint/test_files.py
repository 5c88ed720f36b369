"""Tests for qualify.checkpoint.files: which files an upload ships, which no runtime loads, which are
code, and where a hub snapshot's files may really live. (The structure check built on them is tested
end to end in tests/checks/test_file_accounting.py.)"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

import pytest

from qualify.checkpoint import files


@pytest.mark.parametrize(("rel", "skipped"), [
    (".git/HEAD", True),
    ("sub/.git/config", True),
    (".cache/huggingface/download/x.json", True),
    (".cache/other/x.json", False),
    (".git", False),  # a file called .git is shipped, not a folder left out
    ("model.safetensors", False),
])
def test_only_git_and_the_hub_download_cache_are_left_out(rel: str, skipped: bool) -> None:
    assert files.skipped(rel) is skipped


@pytest.mark.parametrize(("rel", "never"), [
    ("README.md", True), ("docs/Usage.MD", True), ("LICENSE", True), ("LICENSE.txt", True), ("LICENCE.md", True),
    ("NOTICE", True), ("sub/COPYING", True), ("chart.png", True), (".gitattributes", True), (".git/HEAD", True),
    ("config.json", False), ("tokenizer.model", False), ("README.json", False), ("notes.txt", False),
    ("licence", False), ("License.txt", False),  # exact names only
])
def test_never_loaded_files(rel: str, never: bool) -> None:
    assert files.is_never_loaded(rel) is never


@pytest.mark.parametrize("rel", [
    # vLLM 0.32 loads every *.safetensors of a folder without an index, whatever its name says
    "notice.safetensors", "LICENSE.safetensors", "README.safetensors", "NOTICE.safetensors", "COPYING.bin",
    "licence.pt", "LICENSE.json", "NOTICE.model", "README.md.safetensors", "logo.png.safetensors", "LICENSE.py",
    "COPYING.jinja", "README.tiktoken", "sub/LICENSE.safetensors", "LICENSE-weights.safetensors",
])
def test_a_name_a_runtime_may_read_is_never_never_loaded(rel: str) -> None:
    assert files.is_never_loaded(rel) is False
    assert rel.lower().endswith(files.RUNTIME_SUFFIXES)


def test_the_never_loaded_names_carry_no_suffix_a_runtime_reads() -> None:
    for name in files.NEVER_LOADED_NAMES:
        assert not name.lower().endswith(files.RUNTIME_SUFFIXES), name
        assert files.is_never_loaded(name) and files.is_never_loaded(f"docs/{name}")
    assert not set(files.NEVER_LOADED_SUFFIXES) & set(files.RUNTIME_SUFFIXES)


@pytest.mark.parametrize(("rel", "head", "says"), [
    ("modeling.py", b"import os", "a .py file is code"),
    ("lib/Kernel.SO", b"\x7fELF", "a .so file"),
    ("weights.dat", pickle.dumps({"a": 1}, protocol=4)[:8], "holds a pickle"),
    ("weights.dat", b"PK\x03\x04rest", "is a zip archive"),
])
def test_code_and_pickles_are_named_with_the_reason(rel: str, head: bytes, says: str) -> None:
    reason = files.executable_reason(rel, head)
    assert reason is not None and says in reason


@pytest.mark.parametrize("head", [b"", b"\x80", b"\x80\x01", b"{\"a\": 1}", b"PK\x05\x06"])
def test_data_is_not_code(head: bytes) -> None:
    assert files.executable_reason("tokenizer.model", head) is None


def test_code_keys_are_found_anywhere_with_their_path() -> None:
    value = {"auto_map": {"x": 1}, "nested": [{"ok": 1}, {"auto_map": "m.C"}], "auto_mapx": 2}
    assert list(files.code_keys(value)) == ["$.auto_map", "$.nested[1].auto_map"]
    assert list(files.code_keys([1, "auto_map"])) == []


def test_read_head_reads_at_most_n_bytes(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"0123456789")
    assert files.read_head(tmp_path / "f") == b"01234567"
    assert files.read_head(tmp_path / "f", 3) == b"012"
    (tmp_path / "short").write_bytes(b"ab")
    assert files.read_head(tmp_path / "short") == b"ab"


def snapshot(tmp_path: Path) -> tuple[Path, Path]:
    repo = tmp_path / "hub" / "models--org--name"
    snap = repo / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    return repo, snap


def test_a_hub_snapshot_may_keep_its_files_in_its_repos_blobs(tmp_path: Path) -> None:
    repo, snap = snapshot(tmp_path)
    assert files.hub_repo_of(snap) == repo
    assert files.storage_roots(snap) == (snap.resolve(), (repo / "blobs").resolve())
    plain = tmp_path / "plain"
    plain.mkdir()
    assert files.hub_repo_of(plain) is None
    assert files.storage_roots(plain) == (plain.resolve(),)


def test_blobs_that_lead_elsewhere_are_no_storage_root(tmp_path: Path) -> None:
    repo, snap = snapshot(tmp_path)
    os.rmdir(repo / "blobs")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (repo / "blobs").symlink_to(elsewhere)
    assert files.storage_roots(snap) == (snap.resolve(),)


def test_a_blob_is_named_by_its_sha256_or_its_git_blob_id(tmp_path: Path) -> None:
    data = b"tokenizer data"
    sha256 = hashlib.sha256(data).hexdigest()
    git = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    for name in (sha256, git):
        (tmp_path / name).write_bytes(data)
        assert files.blob_name_problem(tmp_path / name, sha256) is None
    wrong_sha, wrong_git = "0" * 64, "0" * 40
    for name in (wrong_sha, wrong_git):
        (tmp_path / name).write_bytes(data)
    assert f"sha256 is {sha256}" in (files.blob_name_problem(tmp_path / wrong_sha, sha256) or "")
    assert f"git blob id is {git}" in (files.blob_name_problem(tmp_path / wrong_git, sha256) or "")
    (tmp_path / "model.bin").write_bytes(data)
    assert "neither a sha256 nor a git blob id" in (files.blob_name_problem(tmp_path / "model.bin", sha256) or "")


def test_everything_an_upload_ships_is_listed_and_links_are_not_followed(tmp_path: Path) -> None:
    (tmp_path / "sub" / "deep").mkdir(parents=True)
    (tmp_path / "sub" / "deep" / "a.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "secret").write_text("x")
    (tmp_path / "linked").symlink_to(outside)
    os.mkfifo(tmp_path / "pipe")
    assert files.list_checkpoint_files(tmp_path) == ["linked", "model.safetensors", "pipe", "sub/deep/a.json"]
