"""Local TCP ports for the servers the harness starts, and who really listens on them.

A readiness probe that asks ``http://127.0.0.1:PORT`` trusts whoever answers there. If
another run's server holds the port (taken between choosing a free port and our server
binding it), our server fails to bind and exits, but the probe is answered by the other
one and the run would measure a server it did not start. So a port is checked free
before a launch, and once the probe succeeds the listening socket must belong to the
process session the harness started (Linux ``/proc``; elsewhere only the first check).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

PROC = Path("/proc")
_TCP_LISTEN = "0A"  # the state column of /proc/net/tcp for a listening socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's choice; free until somebody binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def in_use(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Whether something accepts connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        return s.connect_ex((host, port)) == 0


def listening_inodes(port: int, proc: Path = PROC) -> set[int] | None:
    """Socket inodes listening on ``port`` (any address, IPv4 or IPv6); None where /proc cannot tell."""
    found: set[int] = set()
    readable = False
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _TCP_LISTEN:
                continue
            local_port = fields[1].rsplit(":", 1)[-1]
            if int(local_port, 16) == port:
                found.add(int(fields[9]))
    return found if readable else None


def _session_of(pid_dir: Path) -> int | None:
    try:
        stat = (pid_dir / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
    rest = stat[stat.rfind(")") + 2:].split()
    return int(rest[3]) if len(rest) > 3 else None


def _socket_inodes(pid_dir: Path) -> set[int]:
    out: set[int] = set()
    try:
        fds = list((pid_dir / "fd").iterdir())
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def session_listens(session: int, port: int, proc: Path = PROC) -> bool | None:
    """Whether a process of ``session`` holds the socket listening on ``port``; None if /proc cannot tell."""
    inodes = listening_inodes(port, proc)
    if inodes is None:
        return None
    if not inodes:
        return False
    for pid_dir in proc.iterdir():
        if pid_dir.name.isdigit() and _session_of(pid_dir) == session and _socket_inodes(pid_dir) & inodes:
            return True
    return False


def _pid_namespace(pid_dir: Path) -> str | None:
    try:
        return os.readlink(pid_dir / "ns" / "pid")
    except OSError:
        return None


def namespace_listens(pid: int, port: int, proc: Path = PROC) -> bool | None:
    """Whether a process in ``pid``'s PID namespace (a container's) holds the socket listening on ``port``.

    For a container on the host's network, whose processes the host's /proc shows; None if /proc
    cannot tell (no such process, namespaces unreadable, no /proc/net).
    """
    inodes = listening_inodes(port, proc)
    if inodes is None:
        return None
    namespace = _pid_namespace(proc / str(pid))
    if namespace is None:
        return None
    if not inodes:
        return False
    for pid_dir in proc.iterdir():
        if pid_dir.name.isdigit() and _pid_namespace(pid_dir) == namespace and _socket_inodes(pid_dir) & inodes:
            return True
    return False


__all__ = ["free_port", "in_use", "listening_inodes", "namespace_listens", "session_listens"]
