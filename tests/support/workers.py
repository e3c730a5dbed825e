"""For tests of `marketplace serve --workers N`: which worker holds a connection, and a minimal
HTTP/1.1 client that keeps its one connection (so a request goes to a known worker)."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.processes import descendants


def worker_pids(supervisor: int) -> list[int]:
    """The uvicorn worker processes below the `marketplace serve` supervisor."""
    return sorted(pid for pid, cmd in descendants(supervisor).items() if "spawn_main" in cmd)


# A TCP state in /proc/net/tcp: 01 is ESTABLISHED.
_ESTABLISHED = "01"


def _tcp_sockets() -> Iterator[tuple[int, int, str, str]]:
    """Every TCP socket of this network namespace: local port, remote port, state, inode."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            yield local_port, remote_port, fields[3], fields[9]


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process `pid` has open (from its /proc/<pid>/fd links)."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for name in os.listdir(fd_dir):  # an OSError if `pid` is gone
        try:
            link = os.readlink(fd_dir / name)
        except OSError:  # closed since listed
            continue
        if link.startswith("socket:["):
            inodes.add(link.removeprefix("socket:[").removesuffix("]"))
    return inodes


def _server_side_inode(client_port: int, server_port: int) -> str | None:
    """The socket inode of the server's end of the loopback connection from `client_port`."""
    for local_port, remote_port, _, inode in _tcp_sockets():
        if local_port == server_port and remote_port == client_port:
            return inode
    return None


def _owner(inode: str, pids: list[int]) -> int | None:
    for pid in pids:
        try:
            if inode in _socket_inodes(pid):
                return pid
        except OSError:
            continue
    return None


class Connection:
    """One keep-alive HTTP/1.1 connection; `worker` is the pid of the process that accepted it."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.sock = socket.create_connection((host, port), timeout=60)
        self.buffer = b""
        self.worker: int | None = None

    def send(self, method: str, path: str, body: Any = None, **headers: str) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + data)

    def receive(self) -> tuple[int, Any]:
        """The next response: status and JSON body."""
        while b"\r\n\r\n" not in self.buffer:
            self._read()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(self.buffer) < length:
            self._read()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, json.loads(body) if body else None

    def request(self, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
        self.send(method, path, body, **headers)
        return self.receive()

    def _read(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk

    def close(self) -> None:
        self.sock.close()


def connections_per_worker(
    host: str, port: int, pids: list[int], per_worker: int, seconds: float = 60
) -> dict[int, list[Connection]]:
    """`per_worker` open connections on each worker, found by opening batches of connections
    at once until each worker has accepted enough (the kernel hands each new connection to
    whichever worker accepts first, so one at a time would often reach the same one)."""
    found: dict[int, list[Connection]] = {pid: [] for pid in pids}
    deadline = time.monotonic() + seconds
    while any(len(c) < per_worker for c in found.values()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"connections per worker after {seconds} s: {found}")
        batch = [Connection(host, port) for _ in range(4 * per_worker)]
        for conn in batch:
            conn.send("GET", "/healthz")
        for conn in batch:
            assert conn.receive()[0] == 200  # accepted and answered
            inode = _server_side_inode(conn.sock.getsockname()[1], port)
            conn.worker = _owner(inode, pids) if inode else None
            if conn.worker in found and len(found[conn.worker]) < per_worker:
                found[conn.worker].append(conn)
            else:
                conn.close()
    return found


def established_to(pid: int, remote_ports: set[int]) -> dict[int, int]:
    """How many established TCP connections process `pid` holds to each of `remote_ports`
    (ports it holds none to are left out): its socket inodes matched to the namespace's TCP
    tables, where the connection's far end is one of the ports."""
    inodes = _socket_inodes(pid)  # an OSError if `pid` is gone: the caller's test fails
    held: dict[int, int] = {}
    for _, remote_port, state, inode in _tcp_sockets():
        if remote_port in remote_ports and state == _ESTABLISHED and inode in inodes:
            held[remote_port] = held.get(remote_port, 0) + 1
    return held
