"""Local TCP ports for the servers the harness starts, and who really listens on them.

A readiness probe that asks ``http://127.0.0.1:PORT`` trusts whoever answers there. If
another run's server holds the port (taken between choosing a free port and our server
binding it), our server fails to bind and exits, but the probe is answered by the other
one and the run would measure a server it did not start. So a port is checked free
before a launch, and once the probe succeeds the listening socket must belong to the
process session the harness started (Linux ``/proc``; elsewhere only the first check).

A port is also *chosen* where nothing else takes it between the choice and the bind. Every
outgoing connection on the machine draws a local port from the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``), so a port the kernel handed out as free can be taken
by any client a minute later (measured: a runtime died of "Address already in use" 151 s after its
start). :func:`free_port` therefore draws from outside that range, and reserves the port against
the other runs on the machine with an advisory lock on a file per port in a shared folder
(:data:`LOCK_DIR`), held until :func:`release_port` or the process ends (the kernel drops the lock
of a dead process, so a killed run leaves no stale reservation).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

from qualify.errors import HarnessError

PROC = Path("/proc")
_TCP_LISTEN = "0A"  # the state column of /proc/net/tcp for a listening socket
#: The kernel's ephemeral range where /proc cannot tell (Linux's default).
DEFAULT_EPHEMERAL = (32768, 60999)
#: The lowest port drawn: below it are the ports services are configured on (privileged, and the 1024-9999
#: of development servers, 8000 included).
LOWEST = 10000
#: Where runs on this machine reserve their ports, one lock file per port (``QUALIFY_PORT_LOCKS`` names another).
LOCK_DIR = Path(os.environ.get("QUALIFY_PORT_LOCKS") or Path(tempfile.gettempdir()) / "qualify-ports")
#: Candidates tried before giving up (each is locked, then bound, then left if either fails).
ATTEMPTS = 200

_HELD: dict[int, int] = {}  # port -> descriptor of its lock file, for this process's reservations
_HELD_LOCK = threading.Lock()


def ephemeral_range(proc: Path = PROC) -> tuple[int, int]:
    """The kernel's ephemeral port range (first, last), from ``/proc``; Linux's default where it cannot be read."""
    try:
        first, last = (int(x) for x in (proc / "sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return (first, last) if 0 < first <= last <= 65535 else DEFAULT_EPHEMERAL


def candidate_ranges(ephemeral: tuple[int, int]) -> list[range]:
    """The ports a run may draw: from :data:`LOWEST` up, outside the ephemeral range."""
    first, last = ephemeral
    return [r for r in (range(LOWEST, min(first, 65536)), range(max(last + 1, LOWEST), 65536)) if len(r) > 0]


def _lock(port: int, lock_dir: Path) -> int | None:
    """The descriptor of ``port``'s lock file, locked by this process; None when another run holds it."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # shared by every user's runs; a folder another user made stays theirs
        os.chmod(lock_dir, 0o1777)
    fd = os.open(lock_dir / f"{port}.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        raise
    return fd


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return not in_use(host, port)


def free_port(host: str = "127.0.0.1", *, proc: Path = PROC, lock_dir: Path | None = None) -> int:
    """A port nothing listens on, outside the kernel's ephemeral range, reserved for this process.

    Reserved against every other run on the machine until :func:`release_port` (or this process
    ends); no outgoing connection is given it by the kernel meanwhile.

    Raises:
        HarnessError: no port could be reserved (the ephemeral range covers every port from
            :data:`LOWEST` up, the lock folder cannot be written, or every candidate tried was taken).
    """
    lock_dir = LOCK_DIR if lock_dir is None else lock_dir
    ephemeral = ephemeral_range(proc)
    ranges = candidate_ranges(ephemeral)
    if not ranges:
        raise HarnessError(f"no port to draw from: the kernel's ephemeral range {ephemeral[0]}-{ephemeral[1]} "
                           f"(/proc/sys/net/ipv4/ip_local_port_range) covers every port from {LOWEST} up",
                           hint="narrow it, e.g. sysctl net.ipv4.ip_local_port_range='32768 60999'")
    weights = [len(r) for r in ranges]
    rng = random.SystemRandom()
    for _ in range(ATTEMPTS):
        port = rng.choice(rng.choices(ranges, weights=weights)[0])
        with _HELD_LOCK:
            if port in _HELD:
                continue
        try:
            fd = _lock(port, lock_dir)
        except OSError as exc:
            raise HarnessError(f"{lock_dir}: cannot reserve a port there: {exc.strerror or exc}",
                               hint="set QUALIFY_PORT_LOCKS to a folder this user can write") from None
        if fd is None:
            continue  # another run holds it
        if not _bindable(host, port):
            os.close(fd)
            continue
        with _HELD_LOCK:
            _HELD[port] = fd
        return port
    raise HarnessError(f"no free port outside the ephemeral range {ephemeral[0]}-{ephemeral[1]} after {ATTEMPTS} "
                       f"tries on {host} (reservations in {lock_dir})")


def release_port(port: int) -> None:
    """End this process's reservation of ``port`` (nothing if it holds none)."""
    with _HELD_LOCK:
        fd = _HELD.pop(port, None)
    if fd is not None:
        os.close(fd)


def reserved_ports() -> frozenset[int]:
    """The ports this process holds reserved now."""
    with _HELD_LOCK:
        return frozenset(_HELD)


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


__all__ = ["candidate_ranges", "ephemeral_range", "free_port", "in_use", "listening_inodes", "namespace_listens",
           "release_port", "reserved_ports", "session_listens"]
