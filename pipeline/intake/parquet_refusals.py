"""What a refused Parquet upload is told, and the checks before this process reads the file.

`check_natively_readable` runs `pipeline.store.parquet_probe`'s checks (the envelope in Python,
then the whole file read in a child process) and turns each refusal into the upload's answer:
encryption 400 with its reason, a malformed envelope or a file the reader refuses 400, a footer
that claims more than the file holds or a reader that died or ran out of time 422. A reason
never quotes the file: pyarrow's messages can quote a cell or a path, so they are mapped to
words of ours (`parquet_reason`).
"""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.core.errors import InvalidInput, Unprocessable
from pipeline.store.bounded_read import DatasetBoundsError
from pipeline.store.parquet_envelope import EncryptedParquet, UnsafeParquet
from pipeline.store.parquet_probe import (
    ParquetDecodeError,
    ParquetReaderFailed,
    check_parquet_file,
)


def check_natively_readable(path: Path) -> None:
    """The envelope checked in Python, then the whole file read in a child process
    (`pipeline.store.parquet_probe`): this process reads only what a child read and survived."""
    try:
        check_parquet_file(path)
    except EncryptedParquet as exc:
        raise InvalidInput(str(exc)) from None
    except UnsafeParquet as exc:
        raise InvalidInput(f"not a valid Parquet file: {exc}") from None
    except DatasetBoundsError as exc:
        raise Unprocessable(f"not a trustworthy Parquet file: {exc}") from None
    except ParquetReaderFailed as exc:
        raise Unprocessable(f"not a trustworthy Parquet file: {exc}") from None
    except ParquetDecodeError as exc:
        raise InvalidInput(f"not a valid Parquet file: {parquet_reason(exc)}") from None


# What pyarrow's message says went wrong, in words of ours: its messages can quote a cell
# ("Integer value 18446744073709551615 not in range") or a path, and a refusal never does.
_REASONS = (
    (re.compile(r"thrift", re.I), "its metadata cannot be decoded"),
    (re.compile(r"magic", re.I), "it lacks the Parquet magic bytes"),
    (re.compile(r"reported by footer", re.I), "its footer claims more bytes than it holds"),
    (re.compile(r"compress", re.I), "a compressed page is corrupt"),
    (re.compile(r"end of (stream|file)|EOF|truncat|no more data", re.I), "it is truncated"),
    (
        re.compile(r"no kernel|not implemented|unsupported", re.I),
        "it holds a type or encoding this service cannot read",
    ),
)


def parquet_reason(exc: Exception) -> str:
    message = str(exc)
    for pattern, reason in _REASONS:
        if pattern.search(message):
            return reason
    return "its data cannot be decoded"
