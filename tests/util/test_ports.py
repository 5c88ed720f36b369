"""Tests for qualify.util.ports: who listens on a port, read off /proc (the real one, with a socket this
test holds, and a made-up one for the parsing), and "cannot tell" kept apart from "no"."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from qualify.errors import HarnessError
from qualify.util import ports

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def row(port: int, state: str, inode: int, address: str = "0100007F") -> str:
    return (f"   0: {address}:{port:04X} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000     0        0 "
            f"{inode}\n")


@pytest.fixture
def listener() -> Iterator[tuple[int, int]]:
    """(port, socket inode) of a socket this process listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        inode = os.fstat(s.fileno()).st_ino
        yield s.getsockname()[1], inode


def test_a_free_port_is_free_and_a_listening_one_in_use(listener: tuple[int, int]) -> None:
    port, _ = listener
    assert ports.in_use("127.0.0.1", port)
    free = ports.free_port()
    assert free != port and not ports.in_use("127.0.0.1", free)


def test_the_listening_socket_is_found_by_its_inode(listener: tuple[int, int]) -> None:
    port, inode = listener
    assert ports.listening_inodes(port) == {inode}
    assert ports.listening_inodes(ports.free_port()) == set()


def test_this_session_and_this_namespace_hold_the_listener(listener: tuple[int, int]) -> None:
    port, _ = listener
    assert ports.session_listens(os.getsid(0), port) is True
    assert ports.session_listens(os.getsid(0) + 10_000_000, port) is False  # no process has that session
    assert ports.namespace_listens(os.getpid(), port) is True
    free = ports.free_port()
    assert ports.session_listens(os.getsid(0), free) is False
    assert ports.namespace_listens(os.getpid(), free) is False


def test_only_listening_rows_of_both_tables_count(tmp_path: Path) -> None:
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(HEADER + row(8000, "0A", 111) + row(8000, "01", 222) + row(8001, "0A", 333))
    (tmp_path / "net" / "tcp6").write_text(HEADER + row(8000, "0A", 444, "0" * 32) + "   1: short line\n")
    assert ports.listening_inodes(8000, tmp_path) == {111, 444}  # an established connection (01) is no listener
    assert ports.listening_inodes(8002, tmp_path) == set()


def test_an_unreadable_proc_cannot_tell(tmp_path: Path) -> None:
    assert ports.listening_inodes(8000, tmp_path) is None
    assert ports.session_listens(1, 8000, tmp_path) is None
    assert ports.namespace_listens(1, 8000, tmp_path) is None


def test_a_process_that_is_gone_cannot_tell_its_namespace(tmp_path: Path) -> None:
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(HEADER + row(8000, "0A", 111))
    assert ports.namespace_listens(4242, 8000, tmp_path) is None
    # With a readable table and no socket of that inode in any process, the answer is a plain no.
    assert ports.session_listens(1, 8000, tmp_path) is False


# -- choosing a port: outside the kernel's ephemeral range, reserved against the other runs on the machine


def fake_proc(tmp_path: Path, first: int, last: int) -> Path:
    """A /proc whose ephemeral range is first-last (the ports drawn are then those the test leaves open)."""
    (tmp_path / "proc" / "sys/net/ipv4").mkdir(parents=True)
    (tmp_path / "proc" / "sys/net/ipv4/ip_local_port_range").write_text(f"{first}\t{last}\n")
    return tmp_path / "proc"


def test_a_port_is_drawn_outside_the_kernels_ephemeral_range(tmp_path: Path) -> None:
    first, last = ports.ephemeral_range()  # the machine's own, read from the real /proc
    drawn = [ports.free_port(lock_dir=tmp_path) for _ in range(30)]
    try:
        assert all(not first <= p <= last and p >= ports.LOWEST for p in drawn), (first, last, drawn)
        assert len(set(drawn)) == len(drawn)  # each one reserved: none drawn twice while held
        assert ports.reserved_ports() >= set(drawn)
    finally:
        for p in drawn:
            ports.release_port(p)
    assert not ports.reserved_ports() & set(drawn)


CHILD = """
import sys, time
from pathlib import Path
from qualify.util import ports
port = ports.free_port(proc=Path(sys.argv[1]), lock_dir=Path(sys.argv[2]))
print(port, flush=True)
time.sleep(60)
"""


def test_a_port_another_run_reserved_is_never_drawn(tmp_path: Path) -> None:
    """Two processes, two candidate ports: the second never gets the one the first holds, and gets it once it ends."""
    import subprocess
    import sys

    proc = fake_proc(tmp_path, ports.LOWEST + 2, 65535)  # leaves LOWEST and LOWEST + 1
    locks = tmp_path / "locks"
    other = subprocess.Popen([sys.executable, "-c", CHILD, str(proc), str(locks)], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[2])
    try:
        assert other.stdout is not None
        held = int(other.stdout.readline())
        assert held in (ports.LOWEST, ports.LOWEST + 1)
        assert ports.free_port(proc=proc, lock_dir=locks) == ports.LOWEST + ports.LOWEST + 1 - held
        with pytest.raises(HarnessError, match="no free port outside the ephemeral range"):
            ports.free_port(proc=proc, lock_dir=locks)  # both held: one by the other run, one by this process
    finally:
        other.kill()
        other.wait()
        for p in (ports.LOWEST, ports.LOWEST + 1):
            ports.release_port(p)
    got = ports.free_port(proc=proc, lock_dir=locks)  # the other run ended: the kernel dropped its lock
    ports.release_port(got)


def test_a_port_something_holds_is_never_drawn(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, ports.LOWEST + 2, 65535)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", ports.LOWEST))  # bound, not even listening: a bind there would fail
        except OSError:
            pytest.skip(f"port {ports.LOWEST} is taken on this machine")
        drawn = ports.free_port(proc=proc, lock_dir=tmp_path)
        ports.release_port(drawn)
    assert drawn == ports.LOWEST + 1


def test_an_ephemeral_range_that_leaves_no_port_is_a_harness_error_naming_it(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, 1024, 65535)
    with pytest.raises(HarnessError, match="ephemeral range 1024-65535") as info:
        ports.free_port(proc=proc, lock_dir=tmp_path)
    assert "ip_local_port_range" in str(info.value)
    assert ports.ephemeral_range(tmp_path / "nowhere") == ports.DEFAULT_EPHEMERAL  # unreadable: Linux's default
    assert ports.candidate_ranges((32768, 60999)) == [range(ports.LOWEST, 32768), range(61000, 65536)]
