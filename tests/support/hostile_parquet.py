"""Hostile Parquet files for the tests: a valid file whose footer is rewritten to lie.

The footer of a Parquet file is a Thrift `FileMetaData` struct in the compact protocol, followed
by its 4-byte little-endian length and `PAR1`. This module decodes that struct into plain
Python values, lets a test change fields (row counts, sizes, offsets), and encodes it back, so
the data pages stay exactly as pyarrow wrote them while the footer claims something else.

Field ids (parquet.thrift): FileMetaData 3 num_rows, 4 row_groups; RowGroup 1 columns,
2 total_byte_size, 3 num_rows; ColumnChunk 3 meta_data; ColumnMetaData 5 num_values,
6 total_uncompressed_size, 7 total_compressed_size, 9 data_page_offset.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.store.thrift_compact import (
    BINARY,
    BYTE,
    DOUBLE,
    FALSE,
    I16,
    I32,
    I64,
    LIST,
    SET,
    STOP,
    STRUCT,
    TRUE,
    Struct,
    decode_struct,
)

FILE_NUM_ROWS, FILE_ROW_GROUPS = 3, 4
RG_COLUMNS, RG_TOTAL_BYTE_SIZE, RG_NUM_ROWS = 1, 2, 3
CHUNK_META = 3
META_NUM_VALUES, META_UNCOMPRESSED, META_COMPRESSED, META_DATA_PAGE_OFFSET = 5, 6, 7, 9


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, n: int) -> None:
        while True:
            if n < 0x80:
                self.out.append(n)
                return
            self.out.append((n & 0x7F) | 0x80)
            n >>= 7

    def zigzag(self, n: int) -> None:
        self.varint((n << 1) ^ (n >> 63))

    def value(self, kind: int, value: Any) -> None:
        if kind in (TRUE, FALSE):
            return  # carried in the field header
        if kind == BYTE:
            self.out.append(value & 0xFF)
        elif kind in (I16, I32, I64):
            self.zigzag(value)
        elif kind == DOUBLE:
            self.out += struct.pack("<d", value)
        elif kind == BINARY:
            self.varint(len(value))
            self.out += value
        elif kind in (LIST, SET):
            size = len(value.items)
            if size < 15:
                self.out.append((size << 4) | value.elem_type)
            else:
                self.out.append(0xF0 | value.elem_type)
                self.varint(size)
            for item in value.items:
                if value.elem_type in (TRUE, FALSE):
                    self.out.append(1 if item else 2)
                else:
                    self.value(value.elem_type, item)
        elif kind == STRUCT:
            self.struct(value)
        else:
            raise ValueError(f"unsupported compact type {kind}")

    def struct(self, value: Struct) -> None:
        last = 0
        for fid, (kind, item) in value.fields.items():
            if kind in (TRUE, FALSE):
                kind = TRUE if item else FALSE
            delta = fid - last
            if 0 < delta <= 15:
                self.out.append((delta << 4) | kind)
            else:
                self.out.append(kind)
                self.zigzag(fid)
            last = fid
            self.value(kind, item)
        self.out.append(STOP)


def split_footer(data: bytes) -> tuple[bytes, Struct]:
    """The bytes before the footer, and the decoded FileMetaData."""
    (length,) = struct.unpack("<I", data[-8:-4])
    start = len(data) - 8 - length
    return data[:start], decode_struct(data[start : len(data) - 8])


def join_footer(body: bytes, metadata: Struct) -> bytes:
    writer = _Writer()
    writer.struct(metadata)
    footer = bytes(writer.out)
    return body + footer + struct.pack("<I", len(footer)) + b"PAR1"


def parquet_bytes(table: pa.Table, **options: Any) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, **options)
    return buffer.getvalue()


def rewrite_footer(data: bytes, edit: Any) -> bytes:
    """Decode the footer, let `edit(metadata)` change it in place, encode it back."""
    body, metadata = split_footer(data)
    edit(metadata)
    return join_footer(body, metadata)


def row_groups(metadata: Struct) -> list[Struct]:
    items: list[Struct] = metadata.get(FILE_ROW_GROUPS).items
    return items


def column_meta(row_group: Struct) -> list[Struct]:
    return [chunk.get(CHUNK_META) for chunk in row_group.get(RG_COLUMNS).items]


def claim_rows(rows: int, *, values_too: bool = True) -> Any:
    """An edit: every row group (and the file) claims `rows` rows; column chunks too."""

    def edit(metadata: Struct) -> None:
        groups = row_groups(metadata)
        metadata.set(FILE_NUM_ROWS, rows * len(groups))
        for group in groups:
            group.set(RG_NUM_ROWS, rows)
            if values_too:
                for meta in column_meta(group):
                    meta.set(META_NUM_VALUES, rows)

    return edit


def claim_bytes(extra: int) -> Any:
    """An edit: every column chunk claims `extra` more compressed and uncompressed bytes."""

    def edit(metadata: Struct) -> None:
        for group in row_groups(metadata):
            group.set(RG_TOTAL_BYTE_SIZE, group.get(RG_TOTAL_BYTE_SIZE) + extra)
            for meta in column_meta(group):
                meta.set(META_UNCOMPRESSED, meta.get(META_UNCOMPRESSED) + extra)
                meta.set(META_COMPRESSED, meta.get(META_COMPRESSED) + extra)

    return edit


def hostile_parquet(path: Path, table: pa.Table, edit: Any, **options: Any) -> Path:
    """Write `table` as Parquet to `path` with its footer rewritten by `edit`."""
    path.write_bytes(rewrite_footer(parquet_bytes(table, **options), edit))
    return path
