"""Tests for qualify.util.ports: who listens on a port, read off /proc (the real one, with a socket this
test holds, and a made-up one for the parsing), and "cannot tell" kept apart from "no"."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

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
