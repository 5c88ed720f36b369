"""Tests for qualify.util.atomic: a reader sees the old file or the new one, never half of one.

Each failure (an exception in the writer, Ctrl-C, a full disk, a failed fsync or rename, a
folder that cannot be made) leaves the old file as it was and no temporary file behind.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from qualify.errors import HarnessError
from qualify.util.atomic import atomic_open, atomic_write_bytes, atomic_write_text, default_mode

OLD = b'{"verdict": "old"}\n'


@pytest.fixture
def umask() -> Iterator[int]:
    """A known umask for the test, the process's own restored after it."""
    mask = 0o027
    previous = os.umask(mask)
    try:
        yield mask
    finally:
        os.umask(previous)


@pytest.fixture
def existing(tmp_path: Path) -> Path:
    path = tmp_path / "report.json"
    path.write_bytes(OLD)
    return path


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_default_mode_is_the_base_less_the_umask(umask: int) -> None:
    assert default_mode(0o666) == 0o640
    assert default_mode(0o777) == 0o750
    assert os.umask(umask) == umask  # reading the umask left it as it was


def test_a_new_file_gets_the_mode_a_plain_open_would_give(tmp_path: Path, umask: int) -> None:
    # mkstemp creates 0600; the file must not stay private where open() would not make it so.
    plain = tmp_path / "plain"
    plain.write_bytes(b"")
    path = tmp_path / "new.json"
    atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == 0o640


def test_missing_parent_folders_are_made(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "report.json"
    atomic_write_text(path, "x")
    assert path.read_text() == "x"


def test_the_file_is_replaced_not_rewritten_in_place(existing: Path) -> None:
    with existing.open("rb") as reader:
        atomic_write_bytes(existing, b"new contents")
        assert reader.read() == OLD  # a reader of the old file never sees a mix of the two
    assert existing.read_bytes() == b"new contents"
    assert names(existing.parent) == ["report.json"]


def test_the_temporary_file_lies_beside_the_target_until_renamed(existing: Path) -> None:
    # Beside it, so that the rename stays on one file system and is atomic.
    with atomic_open(existing) as fh:
        fh.write(b"new")
        temps = [n for n in names(existing.parent) if n != "report.json"]
        assert len(temps) == 1 and temps[0].startswith(".report.json.") and temps[0].endswith(".tmp")
        assert existing.read_bytes() == OLD
    assert names(existing.parent) == ["report.json"]


def test_the_data_is_synced_before_the_rename(existing: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bytes] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        seen.append(existing.read_bytes())
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write_bytes(existing, b"new")
    assert seen == [OLD]  # synced once, while the target still held the old contents
    assert existing.read_bytes() == b"new"


@pytest.mark.parametrize("exc_type", [ValueError, KeyboardInterrupt])
def test_an_exception_in_the_writer_keeps_the_old_file(existing: Path, exc_type: type[BaseException]) -> None:
    with pytest.raises(exc_type) as info, atomic_open(existing) as fh:
        fh.write(b"half of the ne")
        raise exc_type("stop")
    assert type(info.value) is exc_type  # passed through as it was, never wrapped
    assert existing.read_bytes() == OLD
    assert names(existing.parent) == ["report.json"]


def test_an_io_error_while_writing_names_the_file(existing: Path) -> None:
    with pytest.raises(HarnessError) as info, atomic_open(existing) as fh:
        fh.write(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert str(info.value) == f"{existing}: cannot write: {os.strerror(errno.ENOSPC)}"
    assert isinstance(info.value.__cause__, OSError)
    assert existing.read_bytes() == OLD
    assert names(existing.parent) == ["report.json"]


def test_a_failed_fsync_keeps_the_old_file(existing: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(HarnessError, match="cannot write: Input/output error"):
        atomic_write_bytes(existing, b"new")
    assert existing.read_bytes() == OLD
    assert names(existing.parent) == ["report.json"]


def test_a_failed_rename_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.mkdir()
    (target / "inside").write_bytes(b"kept")
    with pytest.raises(HarnessError) as info:
        atomic_write_bytes(target, b"new")
    assert str(info.value).startswith(f"{target}: cannot write: ")
    assert (target / "inside").read_bytes() == b"kept"
    assert names(tmp_path) == ["report.json"]


def test_a_folder_that_cannot_be_made_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "runs").write_bytes(b"a file where the folder should be")
    path = tmp_path / "runs" / "run-1" / "report.json"
    with pytest.raises(HarnessError) as info:
        atomic_write_text(path, "x")
    assert str(info.value).startswith(f"{path}: cannot write: ")
    assert (tmp_path / "runs").read_bytes() == b"a file where the folder should be"


def test_text_is_written_as_utf8(tmp_path: Path) -> None:
    path = tmp_path / "card.md"
    atomic_write_text(path, "caf\u00e9 \u2713\n")
    assert path.read_bytes() == "caf\u00e9 \u2713\n".encode()


def test_text_that_is_not_unicode_writes_nothing(existing: Path) -> None:
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(existing, "lone \ud800")
    assert existing.read_bytes() == OLD
    assert names(existing.parent) == ["report.json"]
