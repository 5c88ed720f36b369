"""qualify.checkpoint.pinned: a checkpoint folder copied once, hashed as written, and compared again later."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from qualify.checkpoint.pinned import changes_since, copy_evidence, pin_evidence, pin_folder, verify_pinned


def _folder(root: Path) -> Path:
    root.mkdir()
    (root / "model.safetensors").write_bytes(b"weights" * 100)
    (root / "config.json").write_text('{"a": 1}')
    (root / "sub").mkdir()
    (root / "sub" / "tokenizer.json").write_text("{}")
    return root


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_every_regular_file_is_copied_and_hashed_from_the_bytes_written(tmp_path: Path) -> None:
    origin = _folder(tmp_path / "ckpt")
    pinned = pin_folder(origin, tmp_path / "copy")
    assert pinned.problems == ()
    assert pinned.digests == {"config.json": _sha(b'{"a": 1}'), "model.safetensors": _sha(b"weights" * 100),
                              "sub/tokenizer.json": _sha(b"{}")}
    assert (tmp_path / "copy" / "model.safetensors").read_bytes() == b"weights" * 100
    # Private and read-only: only this process could write it, and nothing does.
    assert stat.S_IMODE(os.stat(tmp_path / "copy").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "copy" / "config.json").st_mode) == 0o444
    assert pin_evidence(pinned).ok
    assert verify_pinned(pinned) == []


def test_an_existing_copy_folder_is_never_reused(tmp_path: Path) -> None:
    from qualify.errors import HarnessError

    origin = _folder(tmp_path / "ckpt")
    (tmp_path / "copy").mkdir()
    with pytest.raises(HarnessError, match="cannot create the run's copy"):
        pin_folder(origin, tmp_path / "copy")


def test_a_file_swapped_after_pinning_is_named_and_the_copy_keeps_the_pinned_bytes(tmp_path: Path) -> None:
    origin = _folder(tmp_path / "ckpt")
    pinned = pin_folder(origin, tmp_path / "copy")
    (origin / "model.safetensors").write_bytes(b"\0" * 700)  # same size, other bytes
    (origin / "extra.safetensors").write_bytes(b"x")
    (origin / "config.json").unlink()
    changes = verify_pinned(pinned)
    assert any(c.startswith("model.safetensors: changed in the checkpoint folder during the run") for c in changes)
    assert "extra.safetensors: appeared in the checkpoint folder during the run" in changes
    assert "config.json: removed from the checkpoint folder during the run" in changes
    # What the checks read is still what was hashed.
    assert (pinned.copy / "model.safetensors").read_bytes() == b"weights" * 100


def test_the_copy_changed_is_named_too(tmp_path: Path) -> None:
    origin = _folder(tmp_path / "ckpt")
    pinned = pin_folder(origin, tmp_path / "copy")
    target = pinned.copy / "config.json"
    os.chmod(target, 0o644)
    target.write_text('{"a": 2}')
    before, after = _sha(b'{"a": 1}')[:12], _sha(b'{"a": 2}')[:12]
    assert verify_pinned(pinned) == [
        f"config.json: changed in the run's copy of the checkpoint during the run (sha256 {before}... when pinned, "
        f"{after}... at the end)"]
    ev = copy_evidence(pinned, pinned.copy)
    assert not ev.ok and ev.findings[0].file == "config.json"
    assert "changed in the loaded folder" in ev.findings[0].message


def test_a_fifo_is_not_pinned_and_does_not_block(tmp_path: Path) -> None:
    origin = _folder(tmp_path / "ckpt")
    os.mkfifo(origin / "model-00002.safetensors")
    pinned = pin_folder(origin, tmp_path / "copy")
    assert pinned.problems == (("model-00002.safetensors", "is a FIFO, socket or device, not a regular file"),)
    ev = pin_evidence(pinned)
    assert not ev.ok
    assert "not pinned: is a FIFO" in ev.failure_text() and "model-00002.safetensors" in ev.failure_text()
    # Still there at the end: already a failure, not repeated as a change.
    assert verify_pinned(pinned) == []


def test_a_hard_link_is_not_pinned(tmp_path: Path) -> None:
    origin = _folder(tmp_path / "ckpt")
    os.link(origin / "model.safetensors", tmp_path / "elsewhere.safetensors")
    pinned = pin_folder(origin, tmp_path / "copy")
    assert [rel for rel, _ in pinned.problems] == ["model.safetensors"]
    assert "hard link (2 names share its bytes)" in pinned.problems[0][1]
    assert "model.safetensors" not in pinned.digests


def test_links_inside_are_followed_and_links_out_are_not_pinned(tmp_path: Path) -> None:
    origin = _folder(tmp_path / "ckpt")
    (tmp_path / "outside.json").write_text("{}")
    os.symlink("config.json", origin / "alias.json")
    os.symlink(tmp_path / "outside.json", origin / "generation_config.json")
    os.symlink("missing.json", origin / "broken.json")
    pinned = pin_folder(origin, tmp_path / "copy")
    assert pinned.digests["alias.json"] == pinned.digests["config.json"]
    assert not (pinned.copy / "alias.json").is_symlink()
    problems = dict(pinned.problems)
    assert problems["generation_config.json"].startswith("resolves outside the checkpoint")
    assert problems["broken.json"] == "is a broken link or names no file"


def test_changes_since_compares_a_folder_with_the_pins(tmp_path: Path) -> None:
    origin = _folder(tmp_path / "ckpt")
    pinned = pin_folder(origin, tmp_path / "copy")
    assert changes_since(pinned.files, pinned.copy, what="x") == []
    assert changes_since(pinned.files, tmp_path / "nowhere", what="the loaded folder") == [
        (".", f"the loaded folder {tmp_path / 'nowhere'} is gone")]


def _sparse(path: Path, size: int, data_at: int) -> None:
    """A file of ``size`` bytes holding data at its start and at ``data_at``, holes (never written) elsewhere."""
    with open(path, "wb") as f:
        f.write(b"# card\n")
        f.seek(data_at)
        f.write(b"middle")
        f.truncate(size)
    if os.stat(path).st_blocks * 512 > 16 << 20:
        pytest.skip("this file system stores no holes: a sparse source cannot be made here")


def _stored(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_a_sparse_file_reads_back_exactly_from_its_sparse_copy(tmp_path: Path) -> None:
    origin = tmp_path / "ckpt"
    origin.mkdir()
    _sparse(origin / "README.md", 96 << 20, 40 << 20)
    pinned = pin_folder(origin, tmp_path / "copy")
    copy = tmp_path / "copy" / "README.md"
    assert copy.read_bytes() == (origin / "README.md").read_bytes()
    assert pinned.digests == {"README.md": _sha((origin / "README.md").read_bytes())}
    assert _stored(copy) < 16 << 20
    assert verify_pinned(pinned) == []


@pytest.mark.slow  # hashes 2 GiB twice
def test_a_2_gib_sparse_card_is_not_written_out_in_full(tmp_path: Path) -> None:
    """A card truncated to 2 GiB (a 1 TB one would fill the disk) costs no disk in the copy."""
    origin = tmp_path / "ckpt"
    origin.mkdir()
    size = 2 << 30
    _sparse(origin / "README.md", size, 1 << 30)
    pinned = pin_folder(origin, tmp_path / "copy")
    copy = tmp_path / "copy" / "README.md"
    assert pinned.problems == () and os.stat(copy).st_size == size
    assert _stored(copy) < 16 << 20, f"the holes were written out: {_stored(copy)} bytes stored"
    h = hashlib.sha256()
    with open(origin / "README.md", "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    assert pinned.digests == {"README.md": h.hexdigest()}


def test_a_dense_file_with_zero_chunks_reads_back_exactly(tmp_path: Path) -> None:
    origin = tmp_path / "ckpt"
    origin.mkdir()
    data = os.urandom(100) + bytes(20 << 20) + os.urandom(5000) + bytes(3)  # zero chunks written as data
    (origin / "model.safetensors").write_bytes(data)
    pinned = pin_folder(origin, tmp_path / "copy")
    assert (tmp_path / "copy" / "model.safetensors").read_bytes() == data
    assert pinned.digests == {"model.safetensors": _sha(data)}


LOW_FDS = """
import os, resource, sys
from pathlib import Path
from qualify.checkpoint.pinned import pin_folder
from qualify.errors import exit_code_for
open_now = len(os.listdir("/proc/self/fd")) - 1  # less the one listdir itself held
resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
try:
    pinned = pin_folder(Path(sys.argv[1]), Path(sys.argv[2]))
except Exception as exc:
    print(type(exc).__name__, int(exit_code_for(exc)), exc)
else:
    print("pinned", pinned.problems)
"""


def test_descriptors_running_out_while_pinning_are_the_machines_fault_not_the_checkpoints(tmp_path: Path) -> None:
    """One descriptor left (a real ulimit in a child): pinning stops with the cause, nothing blamed on a file."""
    import subprocess
    import sys

    origin = _folder(tmp_path / "ckpt")
    done = subprocess.run([sys.executable, "-c", LOW_FDS, str(origin), str(tmp_path / "copy")], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.startswith("ResourceExhausted 3 the machine ran out of file descriptors"), done.stdout + \
        done.stderr
    assert "cannot be read" not in done.stdout and "not pinned" not in done.stdout


FILE_SIZE_LIMIT = """
import resource, signal, sys
from pathlib import Path
from qualify.checkpoint.pinned import pin_folder
from qualify.errors import exit_code_for
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, as a full disk does
resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))
try:
    pin_folder(Path(sys.argv[1]), Path(sys.argv[2]))
except Exception as exc:
    print(type(exc).__name__, int(exit_code_for(exc)), exc)
"""


def test_no_room_to_write_the_copy_is_the_machines_fault_not_the_checkpoints(tmp_path: Path) -> None:
    """The copy cannot be written past 100 bytes (a real ulimit -f in a child): the cause is named, exit 3."""
    import subprocess
    import sys

    origin = _folder(tmp_path / "ckpt")  # its model.safetensors holds 700 bytes
    done = subprocess.run([sys.executable, "-c", FILE_SIZE_LIMIT, str(origin), str(tmp_path / "copy")],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.startswith("ResourceExhausted 3 the machine ran out of file size (this process's limit"), \
        done.stdout + done.stderr
    assert "model.safetensors" in done.stdout
