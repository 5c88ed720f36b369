"""SHA-256 helpers: same digests as hashlib, serial or parallel, and readable failures."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest

from qualify.checkpoint.checksums import sha256_file, sha256_files
from qualify.errors import CheckpointError

CHUNK = 64 << 10  # small chunks so that "bigger than one chunk" stays a small file
SIZES = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17, (8 << 20) + 5]


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    rng = random.Random(1234)
    out = []
    for i, size in enumerate(SIZES):
        p = tmp_path / f"f{i}.bin"
        p.write_bytes(rng.randbytes(size))
        out.append(p)
    return out


def reference(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_empty_file_digest(tmp_path: Path) -> None:
    p = tmp_path / "empty"
    p.write_bytes(b"")
    assert sha256_file(p) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.mark.parametrize("chunk_size", [1, 4096, CHUNK, 8 << 20])
def test_sha256_file_equals_hashlib(files: list[Path], chunk_size: int) -> None:
    for p in files:
        if chunk_size == 1 and p.stat().st_size > CHUNK + 1:
            continue  # byte-at-a-time over megabytes only costs time
        assert sha256_file(p, chunk_size=chunk_size) == reference(p), (p.name, chunk_size)


def test_parallel_equals_serial_and_keeps_order(files: list[Path]) -> None:
    serial = sha256_files(files, workers=1, progress=False)
    parallel = sha256_files(list(reversed(files)), workers=4, progress=False, chunk_size=CHUNK)
    assert serial == parallel == {p: reference(p) for p in files}
    assert list(parallel) == list(reversed(files))


def test_default_workers_and_string_paths(files: list[Path]) -> None:
    got = sha256_files([str(p) for p in files])
    assert got == {p: reference(p) for p in files}


def test_duplicate_and_empty_inputs(files: list[Path]) -> None:
    assert sha256_files([], progress=False) == {}
    assert sha256_files([files[2], files[2]], workers=2) == {files[2]: reference(files[2])}


def test_missing_file_error_names_label(files: list[Path], tmp_path: Path) -> None:
    missing = tmp_path / "gone.safetensors"
    with pytest.raises(CheckpointError) as info:
        sha256_files([*files, missing], workers=3, labels=[*(p.name for p in files), "gone.safetensors"])
    err = info.value
    assert err.file == "gone.safetensors"
    assert str(err).startswith("gone.safetensors: cannot read: ")
    assert "No such file" in str(err)


def test_missing_file_single(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="cannot read") as info:
        sha256_file(tmp_path / "nope")
    assert info.value.file == str(tmp_path / "nope")


def test_directory_and_fifo_are_refused_not_read(files: list[Path], tmp_path: Path) -> None:
    d = tmp_path / "adir"
    d.mkdir()
    with pytest.raises(CheckpointError, match="not a regular file") as info:
        sha256_files([files[0], d], workers=2, labels=["f0", "adir"])
    assert info.value.file == "adir"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # reading it would block forever
    with pytest.raises(CheckpointError, match="not a regular file"):
        sha256_files([fifo], labels=["pipe"])


def test_read_error_mid_run_names_label(tmp_path: Path, files: list[Path]) -> None:
    # Not a stat() failure: the file is there but reading it fails (a directory reached
    # through sha256_file, which does no stat() first).
    d = tmp_path / "adir"
    d.mkdir()
    with pytest.raises(CheckpointError, match="cannot read") as info:
        sha256_file(d)
    assert info.value.file == str(d)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_permission_denied(files: list[Path]) -> None:
    files[1].chmod(0)
    try:
        with pytest.raises(CheckpointError, match="Permission denied"):
            sha256_files([files[1]], labels=["f1"])
    finally:
        files[1].chmod(0o644)


def test_labels_must_match_paths(files: list[Path]) -> None:
    with pytest.raises(ValueError, match="labels"):
        sha256_files(files, labels=["one"])
    with pytest.raises(ValueError, match="workers"):
        sha256_files(files, workers=0)


def test_not_a_terminal_prints_nothing(files: list[Path], capfd: pytest.CaptureFixture[str]) -> None:
    sha256_files(files, workers=2)  # progress=None: stderr is captured, so not a terminal
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_forced_progress_still_hashes_right(files: list[Path], capfd: pytest.CaptureFixture[str]) -> None:
    got = sha256_files(files, workers=2, progress=True, chunk_size=CHUNK)
    assert got == {p: reference(p) for p in files}
    out, _ = capfd.readouterr()
    assert out == "", "progress goes to stderr only"


# -- the digest memo: a file is hashed once per run while it is provably unchanged ---------------


@pytest.fixture
def memo(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """A fresh memo with no settling time, and a log of the files really hashed."""
    from qualify.checkpoint import checksums

    monkeypatch.setattr(checksums, "_MEMO", checksums.DigestMemo(settle_s=0.0))
    hashed: list[Path] = []
    real = checksums._hash

    def counting(path: Path, *args: object) -> str:
        hashed.append(path)
        return real(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(checksums, "_hash", counting)
    return hashed


def test_an_unchanged_file_is_hashed_once(files: list[Path], memo: list[Path]) -> None:
    first = sha256_files(files)
    assert sorted(memo) == sorted(files)
    again = sha256_files(files)
    assert again == first and sorted(memo) == sorted(files)  # nothing hashed the second time
    assert again == {p: reference(p) for p in files}


def test_a_changed_file_is_hashed_again_even_with_its_times_put_back(files: list[Path], memo: list[Path]) -> None:
    p = files[3]
    before = sha256_files([p])[p]
    st = p.stat()
    raw = bytearray(p.read_bytes())
    raw[5] ^= 1  # same size
    p.write_bytes(bytes(raw))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime restored; ctime cannot be
    after = sha256_files([p])[p]
    assert after != before and after == reference(p)
    assert memo == [p, p]


def test_a_replaced_file_is_hashed_again(files: list[Path], memo: list[Path], tmp_path: Path) -> None:
    p = files[2]
    sha256_files([p])
    other = tmp_path / "other"
    other.write_bytes(bytes(reversed(p.read_bytes())))
    other.replace(p)  # a new inode under the same name
    assert sha256_files([p])[p] == reference(p)
    assert memo == [p, p]


def test_a_file_written_just_before_its_hash_is_not_remembered(files: list[Path], monkeypatch) -> None:
    from qualify.checkpoint import checksums

    monkeypatch.setattr(checksums, "_MEMO", checksums.DigestMemo(settle_s=3600.0))
    sha256_files(files[:2])
    assert all(checksums._MEMO.get(p, p.stat()) is None for p in files[:2])


def test_reuse_false_always_reads_and_remembers_nothing(files: list[Path], memo: list[Path]) -> None:
    sha256_files(files[:2], reuse=False)
    sha256_files(files[:2], reuse=False)
    assert len(memo) == 4  # read every time (what a benchmark must measure)
    sha256_files(files[:2])
    assert len(memo) == 6  # nothing was remembered by the reuse=False runs
