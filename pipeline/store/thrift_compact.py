"""Decoding Thrift's compact protocol (a Parquet footer) in Python, bounded for untrusted bytes.

A Parquet footer is a Thrift `FileMetaData` struct in the compact protocol. This decoder turns
it into plain values (`Struct`, `ListValue`, ints, bytes) without any native code, so a file
can be looked at before pyarrow touches it (`pipeline.store.parquet_envelope`). Every read is
checked against the bytes there are, nesting is held to `MAX_DEPTH`, and a list may not claim
more items than bytes remain; anything else is a `ThriftError` (a ValueError), never a crash or
a large allocation.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)
# Parquet's structs nest about six deep (FileMetaData > RowGroup > ColumnChunk > ...).
MAX_DEPTH = 32
_MAX_VARINT_BYTES = 10


class ThriftError(ValueError):
    """The bytes are not a well-formed compact-protocol value."""


@dataclass
class Struct:
    """A decoded Thrift struct: field id → (compact type, value), in wire order."""

    fields: dict[int, tuple[int, Any]] = field(default_factory=dict)

    def get(self, fid: int) -> Any:
        return self.fields[fid][1]

    def set(self, fid: int, value: Any) -> None:
        kind, _ = self.fields[fid]
        self.fields[fid] = (kind, value)

    def has(self, fid: int) -> bool:
        return fid in self.fields


@dataclass
class ListValue:
    elem_type: int
    items: list[Any]


class Reader:
    """Reads compact-protocol values from `data`, never past its end."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ThriftError("the value ends early")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise ThriftError("the value ends early")
        raw = self.data[self.pos : self.pos + size]
        self.pos += size
        return raw

    def varint(self) -> int:
        shift = result = 0
        for _ in range(_MAX_VARINT_BYTES):
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
        raise ThriftError("a varint is too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, kind: int, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise ThriftError("values nest too deep")
        if kind in (TRUE, FALSE):
            return kind == TRUE
        if kind == BYTE:
            return self.byte()
        if kind in (I16, I32, I64):
            return self.zigzag()
        if kind == DOUBLE:
            (number,) = struct.unpack("<d", self.take(8))
            return number
        if kind == BINARY:
            return self.take(self.varint())
        if kind in (LIST, SET):
            header = self.byte()
            size, elem = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            if size > len(self.data) - self.pos:  # every item takes at least one byte
                raise ThriftError("a list claims more items than there are bytes")
            if elem in (TRUE, FALSE):
                return ListValue(elem, [self.byte() == 1 for _ in range(size)])
            return ListValue(elem, [self.value(elem, depth + 1) for _ in range(size)])
        if kind == MAP:
            size = self.varint()
            if size == 0:
                return {}
            types = self.byte()
            if 2 * size > len(self.data) - self.pos:
                raise ThriftError("a map claims more entries than there are bytes")
            key, item = types >> 4, types & 0x0F
            return {
                _hashable(self.value(key, depth + 1)): self.value(item, depth + 1)
                for _ in range(size)
            }
        if kind == STRUCT:
            return self.struct(depth + 1)
        raise ThriftError(f"unknown compact type {kind}")

    def struct(self, depth: int = 0) -> Struct:
        result = Struct()
        last = 0
        while True:
            header = self.byte()
            if header == STOP:
                return result
            delta, kind = header >> 4, header & 0x0F
            fid = last + delta if delta else self.zigzag()
            last = fid
            result.fields[fid] = (kind, self.value(kind, depth))


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (int, float, bool, bytes)) else repr(value)


def decode_struct(data: bytes) -> Struct:
    """The struct `data` starts with (ThriftError when it is not one)."""
    return Reader(data).struct()
