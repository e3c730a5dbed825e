"""A Parquet file's envelope checked in Python, before any native reader sees its bytes.

pyarrow aborts the whole process (a C++ exception no caller can catch) on some footers instead
of raising: reading the column metadata of an encrypted column is one. So the footer is first
decoded here, in Python only (`pipeline.store.thrift_compact`), and a file is refused when:

- it ends with `PARE` (its footer is encrypted) or its footer names an encryption algorithm, or
  a column chunk carries crypto metadata or encrypted column metadata: "encrypted Parquet is
  not supported" (the service holds no keys);
- it does not start and end with `PAR1`, or its footer length does not fit the file, or the
  footer is larger than `MAX_FOOTER_BYTES`, or it does not decode;
- a column chunk has no metadata, or a row group holds a different number of column chunks
  than the schema has leaf columns (pyarrow indexes the schema with the chunk's position).

What passes is then read natively in a child process first (`pipeline.store.parquet_probe`):
these checks give clear reasons for what is known; the child covers what is not.
"""

from __future__ import annotations

import struct
from pathlib import Path

from pipeline.store.formats import PARQUET_MAGIC
from pipeline.store.thrift_compact import Struct, ThriftError, decode_struct

ENCRYPTED_FOOTER_MAGIC = b"PARE"
# Magic, then the footer's 4-byte length and the closing magic.
_ENVELOPE_BYTES = 12
MAX_FOOTER_BYTES = 16 * 1024 * 1024

# Field ids (parquet.thrift).
_FILE_SCHEMA, _FILE_ROW_GROUPS, _FILE_ENCRYPTION = 2, 4, 8
_SCHEMA_TYPE = 1
_GROUP_COLUMNS = 1
_CHUNK_META, _CHUNK_CRYPTO, _CHUNK_ENCRYPTED_META = 3, 8, 9

ENCRYPTED = "encrypted Parquet is not supported"


class UnsafeParquet(ValueError):
    """The file is not one the native reader may be given; the message says why (no content)."""


class EncryptedParquet(UnsafeParquet):
    """The file (its footer or some of its columns) is encrypted."""


def check_parquet_envelope(path: Path) -> None:
    """UnsafeParquet (EncryptedParquet for encryption) unless the file passes (see module)."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(len(PARQUET_MAGIC))
        fh.seek(max(0, size - 8))
        tail = fh.read(8)
        if size < _ENVELOPE_BYTES:
            raise UnsafeParquet("it is too short to be Parquet")
        if tail[4:] == ENCRYPTED_FOOTER_MAGIC:
            raise EncryptedParquet(f"{ENCRYPTED} (its footer is encrypted)")
        if head != PARQUET_MAGIC or tail[4:] != PARQUET_MAGIC:
            raise UnsafeParquet("it lacks the Parquet magic bytes")
        (length,) = struct.unpack("<I", tail[:4])
        if length == 0 or length > size - _ENVELOPE_BYTES:
            raise UnsafeParquet("its footer length does not fit the file")
        if length > MAX_FOOTER_BYTES:
            raise UnsafeParquet(
                f"its footer ({length:,} bytes) is larger than {MAX_FOOTER_BYTES:,} bytes"
            )
        fh.seek(size - 8 - length)
        footer = fh.read(length)
    try:
        metadata = decode_struct(footer)
        _check_metadata(metadata)
    except ThriftError:
        raise UnsafeParquet("its metadata cannot be decoded") from None
    except (KeyError, TypeError, AttributeError):
        raise UnsafeParquet("its metadata is not a Parquet footer") from None


def _check_metadata(metadata: Struct) -> None:
    if metadata.has(_FILE_ENCRYPTION):
        raise EncryptedParquet(f"{ENCRYPTED} (its columns are encrypted)")
    schema = _items(metadata, _FILE_SCHEMA)
    leaves = sum(1 for element in schema if _struct(element).has(_SCHEMA_TYPE))
    for index, group in enumerate(_items(metadata, _FILE_ROW_GROUPS)):
        chunks = _items(_struct(group), _GROUP_COLUMNS)
        for chunk in map(_struct, chunks):
            if chunk.has(_CHUNK_CRYPTO) or chunk.has(_CHUNK_ENCRYPTED_META):
                raise EncryptedParquet(f"{ENCRYPTED} (its columns are encrypted)")
            if not isinstance(chunk.fields.get(_CHUNK_META, (0, None))[1], Struct):
                raise UnsafeParquet(f"a column chunk of row group {index} has no metadata")
        if len(chunks) != leaves:
            raise UnsafeParquet(
                f"row group {index} holds {len(chunks):,} column chunks; "
                f"the schema has {leaves:,} columns"
            )


def _items(value: Struct, fid: int) -> list[object]:
    items = value.get(fid).items
    if not isinstance(items, list):
        raise TypeError(fid)
    return items


def _struct(value: object) -> Struct:
    if not isinstance(value, Struct):
        raise TypeError(type(value).__name__)
    return value
