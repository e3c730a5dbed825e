"""Untrusted Parquet bytes meet the native reader in a child process first.

pyarrow's C++ reader aborts the process on some inputs instead of raising (an exception thrown
where no caller can catch it; pyarrow 26 on encrypted column metadata), and a crash in native
code on a malformed page would do the same. An API worker or a pipeline run must not die with
it. So before a process reads a Parquet file it has not read before, `check_parquet_file`:

1. checks the envelope in Python (`pipeline.store.parquet_envelope`): the magic, the footer
   length, the footer itself decoded without native code, encryption refused with its reason;
2. reads the whole file natively in a child process, as the service reads it: the footer's
   claims checked (`check_parquet_footer`), every row group decoded in bounded batches
   (`iter_parquet_batches`). The child reports the first refusal; a child that dies (a signal,
   an abort) or outlives `probe_seconds` is the file's failure, not the caller's.

Only then may the caller read the file itself. The children are forked by a small server
process (`python -m pipeline.store.parquet_probe`, started at a process's first check, pyarrow
already imported; one per concurrent check, at most four, two kept for the next): a fork of the
caller itself would copy the locks of its other threads, and a new interpreter per file costs a
third of a second. The server itself stops a child at its deadline and reaps it; the caller
stops a server only if it has not answered a few seconds past that deadline. A child dies with
its server (`PR_SET_PDEATHSIG`), a server when its caller closes its input. (A child whose
server was killed is adopted by the nearest reaper: in a container, `marketplace serve` itself
as PID 1, which does not reap it. The server reaping its own children keeps that to a server
stuck past its grace; killed by the caller at every deadline, it left a zombie each time.)
A file that passed is remembered by its identity (device, inode, size, modification time) for
the life of the process: the pipeline reading it again pays nothing.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.store.bounded_read import (
    DatasetBoundsError,
    ReadBudget,
    check_parquet_footer,
    iter_parquet_batches,
)
from pipeline.store.parquet_envelope import check_parquet_envelope

# A child may read for this long, or longer for a large file (`probe_seconds`).
PROBE_MIN_SECONDS = 10.0
PROBE_BYTES_PER_SECOND = 2 * 1024 * 1024
# What a child's read may allocate beyond its decoded-bytes budget (buffers, pages, libraries).
_CHILD_OVERHEAD_BYTES = 1024 * 1024 * 1024
_REMEMBERED_FILES = 1024
_IDLE_SERVERS = 2
# A server holds an interpreter with pyarrow (about 70 MB RSS): a burst of uploads waits for one.
_MAX_SERVERS = 4
PARQUET_BUFFER_BYTES = 4 * 1024 * 1024
_PR_SET_PDEATHSIG = 1
# The child keeps no batch: small ones are decoded faster in its fresh memory than large ones.
_BATCH_ROWS = 64 * 1024
_MESSAGE_CHARS = 2000
# How long past a child's deadline a server may take to stop it and answer.
_SERVER_GRACE_SECONDS = 5.0
_REPORT_BYTES = 4 * _MESSAGE_CHARS


class ParquetReaderFailed(ValueError):
    """The native reader died on the file, or took too long; the message says which."""


class ParquetDecodeError(ValueError):
    """The native reader refused the file; the message is the reader's own (may quote data)."""


_checked: OrderedDict[tuple[int, int, int, int], None] = OrderedDict()
_lock = threading.Lock()


def probe_seconds(size_bytes: int) -> float:
    """How long a child may take to read a file of `size_bytes`."""
    return max(PROBE_MIN_SECONDS, size_bytes / PROBE_BYTES_PER_SECOND)


def check_parquet_file(path: Path, seconds: float | None = None) -> None:
    """Raise unless `path` may be read natively in this process (see module).

    UnsafeParquet (EncryptedParquet) from the envelope; DatasetBoundsError for a footer that
    claims more than the file holds or data past its budget; ParquetDecodeError for a file the
    reader refuses; ParquetReaderFailed for a child that died or ran out of time.
    """
    stat = path.stat()
    identity = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    with _lock:
        if identity in _checked:
            _checked.move_to_end(identity)
            return
    check_parquet_envelope(path)
    _probe(path, probe_seconds(stat.st_size) if seconds is None else seconds)
    with _lock:
        _checked[identity] = None
        while len(_checked) > _REMEMBERED_FILES:
            _checked.popitem(last=False)


def _probe(path: Path, seconds: float) -> None:
    global _owner, _servers, _idle_lock
    if _owner != os.getpid():  # a forked copy of this process (one thread): its parent's
        _owner = os.getpid()  # servers are not ours to use or stop, its locks not ours to wait
        _idle.clear()
        _servers = threading.BoundedSemaphore(_MAX_SERVERS)
        _idle_lock = threading.Lock()
    with _servers:  # at most `_MAX_SERVERS` at once; more checks wait for one
        _probe_with_a_server(path, seconds)


def _probe_with_a_server(path: Path, seconds: float) -> None:
    with _idle_lock:
        server = _idle.pop() if _idle else None
    if server is not None and server.poll() is not None:  # it died while idle
        _stop(server)
        server = None
    if server is None:
        server = _start_server()
    try:
        verdict, message = _ask(server, str(path), seconds)
    except BaseException:
        _stop(server)
        raise
    with _idle_lock:
        if len(_idle) < _IDLE_SERVERS:
            _idle.append(server)
            server = None
    if server is not None:
        _stop(server)
    if verdict == "bounds":
        raise DatasetBoundsError(message)
    if verdict == "invalid":
        raise ParquetDecodeError(message)
    if verdict == "died":
        raise ParquetReaderFailed(message)


_idle: list[subprocess.Popen[bytes]] = []
_servers = threading.BoundedSemaphore(_MAX_SERVERS)
_idle_lock = threading.Lock()
_owner = os.getpid()


def _start_server() -> subprocess.Popen[bytes]:
    root = str(Path(__file__).resolve().parents[2])  # where the `pipeline` package lies
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen(
        [sys.executable, "-m", __name__],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": path},
    )


def _ask(server: subprocess.Popen[bytes], path: str, seconds: float) -> tuple[str, str]:
    assert server.stdin is not None and server.stdout is not None
    try:
        server.stdin.write(json.dumps([path, seconds]).encode() + b"\n")
        server.stdin.flush()
    except OSError:
        raise ParquetReaderFailed("the Parquet reader could not be started") from None
    # The server answers at the child's deadline; past the grace it is stuck, and is stopped.
    ready, _, _ = select.select([server.stdout], [], [], seconds + _SERVER_GRACE_SECONDS)
    if not ready:
        raise ParquetReaderFailed(_too_long(seconds))
    line = server.stdout.readline()
    if not line:
        raise ParquetReaderFailed("the Parquet reader stopped on it")
    verdict, message = json.loads(line)
    return str(verdict), str(message)


def _stop(server: subprocess.Popen[bytes]) -> None:
    server.kill()
    server.wait()
    for stream in (server.stdin, server.stdout):
        if stream is not None:
            stream.close()


# The server and its children (this module run as a program).


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """Fork one child per requested path (a JSON line); answer [verdict, message] lines."""
    for line in requests:
        path, seconds = json.loads(line)
        receive, send = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(receive)
            try:
                report = json.dumps(_read(path)).encode()
            except BaseException as exc:  # whatever it is, it is the file's
                report = json.dumps(["invalid", type(exc).__name__]).encode()
            os.write(send, report)
            os._exit(0)
        os.close(send)
        try:
            report = _report(receive, seconds)
        except TimeoutError:  # stopped and reaped here: no child outlives its deadline
            os.kill(pid, signal.SIGKILL)
            report = json.dumps(["died", _too_long(seconds)]).encode()
        finally:
            os.close(receive)
        _, status = os.waitpid(pid, 0)
        if not report:
            code = os.waitstatus_to_exitcode(status)
            how = f"signal {-code}" if code < 0 else f"exit {code}"
            report = json.dumps(["died", f"the Parquet reader stopped on it ({how})"]).encode()
        answers.write(report + b"\n")
        answers.flush()


def _report(receive: int, seconds: float) -> bytes:
    """What the child wrote before closing its end; TimeoutError past `seconds`."""
    deadline = time.monotonic() + seconds
    report = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([receive], [], [], left)[0]:
            raise TimeoutError
        data = os.read(receive, _REPORT_BYTES)
        if not data:
            return report
        report += data


def _too_long(seconds: float) -> str:
    return f"reading it takes longer than {seconds:g} s"


def _read(path: str) -> tuple[str, str]:
    """The child: read `path` as the service does; (ok | bounds | invalid, text)."""
    _die_with_parent()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # an abort leaves no core file behind
    size = os.stat(path).st_size
    budget = ReadBudget.for_file(size)
    _limit_memory(budget.max_decoded_bytes + _CHILD_OVERHEAD_BYTES)
    try:
        parquet = pq.ParquetFile(path, buffer_size=PARQUET_BUFFER_BYTES)
        _ = parquet.schema_arrow
        check_parquet_footer(parquet.metadata, size, budget)
        for _batch in iter_parquet_batches(parquet, size, budget, rows_per_batch=_BATCH_ROWS):
            pass
    except DatasetBoundsError as exc:
        return "bounds", str(exc)
    except (pa.ArrowException, OSError, ValueError, MemoryError) as exc:
        return "invalid", (str(exc) or type(exc).__name__)[:_MESSAGE_CHARS]
    return "ok", ""


def _limit_memory(limit: int) -> None:
    """The child's data segment held to `limit` bytes (or the lower limit already set)."""
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


def _die_with_parent() -> None:
    if sys.platform == "linux":  # elsewhere the server's own end closes the child's work
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the server is already gone
        os._exit(1)


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
