"""Seeded mutations of real CSV and Parquet files, for `bench/fuzz_uploads.py`.

Seeds: the vendored apache/parquet-testing files (tests/vendor/parquet-testing, encrypted and
broken ones included) and scikit-learn's bundled data sets written as CSV and as Parquet by
pyarrow (several codecs, dictionary on and off, data page v1 and v2, small row groups).

Mutations (one to three stacked, chosen by a seeded `random.Random`): byte flips anywhere or in
the footer, truncations, footer-length and magic edits, Thrift-aware footer edits (any integer
field of any struct set to 0, -1, a huge or a nearby value; codecs; encryption fields; the
schema's types and repetitions), page-header edits (huge or negative declared page sizes, the
footer's offsets moved to match), and for CSV: NULs, stray quotes, backslash escapes, bare CRs,
invalid UTF-8, control characters in the header, duplicated columns, JSON-looking heads, PII,
files past the size limit. Every file is also sent under the other format's name now and then.
"""

from __future__ import annotations

import io
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from sklearn import datasets

from pipeline.store.thrift_compact import I32, I64, STRUCT, ListValue, Reader, Struct
from tests.support.hostile_parquet import join_footer, split_footer

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "tests" / "vendor" / "parquet-testing"
CSV_SHARE = 0.3
HUGE = [0, -1, 1, 2**31 - 1, 2**32, 2**62, -(2**31), 2**63 - 1]


@dataclass(frozen=True)
class Seed:
    name: str
    kind: str  # "csv" | "parquet"
    data: bytes
    target: str
    inputs: tuple[str, ...]


@dataclass(frozen=True)
class Mutant:
    index: int
    seed: str
    mutations: tuple[str, ...]
    filename: str
    data: bytes
    target: str
    inputs: tuple[str, ...]


def _sklearn_tables() -> dict[str, pa.Table]:
    tables = {}
    for name, load in {
        "iris": datasets.load_iris,
        "wine": datasets.load_wine,
        "breast_cancer": datasets.load_breast_cancer,
        "diabetes": datasets.load_diabetes,
    }.items():
        frame = load(as_frame=True).frame
        frame.columns = [str(c).replace(" ", "_").replace("(", "").replace(")", "") for c in frame]
        tables[name] = pa.Table.from_pandas(frame, preserve_index=False)
    return tables


_PARQUET_OPTIONS: list[dict[str, Any]] = [
    {"compression": "snappy"},
    {"compression": "zstd", "use_dictionary": False},
    {"compression": "gzip", "data_page_version": "2.0"},
    {"compression": "brotli", "row_group_size": 40},
    {"compression": "lz4", "write_statistics": False},
    {"compression": "none", "row_group_size": 100, "data_page_size": 512},
]


def seeds() -> list[Seed]:
    """Every seed file (see module), in a fixed order."""
    out: list[Seed] = []
    for path in sorted(VENDOR.rglob("*")):
        if not path.is_file() or path.suffix in (".md", ".txt"):
            continue
        name = str(path.relative_to(VENDOR))
        kind = "csv" if path.suffix == ".csv" else "parquet"
        target, inputs = _columns(path, kind, name)
        out.append(Seed(name, kind, path.read_bytes(), target, inputs))
    for index, (name, table) in enumerate(_sklearn_tables().items()):
        columns = table.column_names
        target, inputs = "target", tuple(c for c in columns[:3] if c != "target")
        sink = io.BytesIO()
        pacsv.write_csv(table, sink)
        out.append(Seed(f"sklearn/{name}.csv", "csv", sink.getvalue(), target, inputs))
        for number, options in enumerate(_PARQUET_OPTIONS):
            if (number + index) % 2:  # half of the option sets per data set
                continue
            sink = io.BytesIO()
            pq.write_table(table, sink, **options)
            label = f"sklearn/{name}.{options['compression']}.parquet"
            out.append(Seed(label, "parquet", sink.getvalue(), target, inputs))
    return out


def _columns(path: Path, kind: str, name: str) -> tuple[str, tuple[str, ...]]:
    """A target and input columns from the file's own (encrypted or broken files: made up)."""
    if "encrypt" in name or name.startswith("bad_data"):
        return "target", ()
    if kind == "csv":
        names = path.read_text().splitlines()[0].split(",")
    else:
        names = pq.read_schema(path).names
    return names[0], tuple(names[1:3])


# Byte-level mutations (any file).


def flip_bytes(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 16)):
        if out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def truncate(data: bytes, rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        return data[: len(data) - rng.randint(1, min(64, max(1, len(data))))]
    return data[: rng.randrange(max(1, len(data)))]


def past_the_limit(data: bytes, rng: random.Random, limit: int) -> bytes:
    """The file repeated until it passes `limit` bytes (413)."""
    return data * (limit // max(1, len(data)) + 2)


# Parquet mutations.


def flip_footer(data: bytes, rng: random.Random) -> bytes:
    length = int.from_bytes(data[-8:-4], "little") if len(data) >= 8 else 0
    start = max(0, len(data) - 8 - min(length, len(data)))
    out = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        position = rng.randrange(start, len(out)) if len(out) > start else 0
        if out:
            out[position] = rng.randrange(256)
    return bytes(out)


def footer_length(data: bytes, rng: random.Random) -> bytes:
    value = rng.choice([0, 1, len(data), len(data) - 8, 2**31, 2**32 - 1, rng.randrange(4096)])
    return data[:-8] + value.to_bytes(4, "little") + data[-4:]


def magic(data: bytes, rng: random.Random) -> bytes:
    choice = rng.randrange(4)
    if choice == 0:
        return data[:-4] + b"PARE"
    if choice == 1:
        return b"PARE" + data[4:]
    if choice == 2:
        return b"PARE" + data[4:-4] + b"PARE"
    return data[:-4] + b"PAR2"


def _structs(value: Any) -> list[Struct]:
    """Every struct inside `value`, itself included."""
    found: list[Struct] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Struct):
            found.append(item)
            stack.extend(v for _, v in item.fields.values())
        elif isinstance(item, ListValue):
            stack.extend(item.items)
    return found


def _footer_edit(edit: Callable[[Struct, random.Random], None]) -> Callable[..., bytes]:
    def mutate(data: bytes, rng: random.Random) -> bytes:
        try:
            body, metadata = split_footer(data)
            edit(metadata, rng)
            return join_footer(body, metadata)
        except (ValueError, IndexError, KeyError, TypeError, AttributeError, struct.error):
            return flip_footer(data, rng)  # not a footer these edits understand

    return mutate


def _any_integer(metadata: Struct, rng: random.Random) -> None:
    fields = [
        (s, fid)
        for s in _structs(metadata)
        for fid, (kind, _) in s.fields.items()
        if kind in (I32, I64)
    ]
    if fields:
        struct, fid = rng.choice(fields)
        value = struct.get(fid)
        struct.set(fid, rng.choice([*HUGE, value * 2, value + rng.randint(-9, 9)]))


def _codec(metadata: Struct, rng: random.Random) -> None:
    for s in _structs(metadata):
        if 4 in s.fields and 9 in s.fields and 7 in s.fields:  # a ColumnMetaData
            _set_integer(s, 4, rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 99, -1]))


def _encryption(metadata: Struct, rng: random.Random) -> None:
    if rng.random() < 0.5:  # FileMetaData.encryption_algorithm: AES_GCM_V1 {}
        metadata.fields[8] = (STRUCT, Struct({1: (STRUCT, Struct())}))
        return
    for s in _structs(metadata):
        if 3 in s.fields and isinstance(s.get(3), Struct) and 2 in s.fields:  # a ColumnChunk
            s.fields[8] = (STRUCT, Struct({1: (STRUCT, Struct())}))  # ENCRYPTION_WITH_FOOTER_KEY
            return


def _set_integer(struct: Struct, fid: int, value: int) -> None:
    if struct.fields.get(fid, (None,))[0] in (I32, I64):
        struct.set(fid, value)


def _huge_sizes(metadata: Struct, rng: random.Random) -> None:
    """Row groups' rows and bytes, column chunks' values and sizes: huge."""
    for s in _structs(metadata):
        for fid in (5, 6, 7) if 9 in s.fields else (2, 3) if 1 in s.fields else ():
            if rng.random() < 0.5:
                _set_integer(s, fid, rng.choice(HUGE[3:]))
    _set_integer(metadata, 3, rng.choice([metadata.get(3), *HUGE]))


def _schema(metadata: Struct, rng: random.Random) -> None:
    elements = metadata.get(2).items
    element = rng.choice(elements)
    fid = rng.choice([1, 3, 5, 6, 7, 8])  # type, repetition, children, converted, scale, prec.
    element.fields[fid] = (I32, rng.choice([0, 1, 2, 5, 6, 7, 30, -1, 2**31 - 1]))


def _chunk_metas(metadata: Struct) -> list[Struct]:
    return [s for s in _structs(metadata) if 9 in s.fields and 7 in s.fields and 5 in s.fields]


def page_header(data: bytes, rng: random.Random) -> bytes:
    """A page header's declared sizes or counts made huge or negative; offsets kept right."""
    try:
        return _page_header(data, rng)
    except (ValueError, IndexError, KeyError, TypeError, AttributeError, struct.error):
        return flip_footer(data, rng)  # not a file these edits understand


def _page_header(data: bytes, rng: random.Random) -> bytes:
    body, metadata = split_footer(data)
    meta = rng.choice(_chunk_metas(metadata))
    start = meta.get(9)
    reader = Reader(body[start:])
    header = reader.struct()
    if rng.random() < 2 / 3:
        _set_integer(header, rng.choice([2, 3]), rng.choice(HUGE))  # (un)compressed page size
    else:
        for fid in (5, 7, 8):  # the data page (v1 or v2) or dictionary page header
            if fid in header.fields and isinstance(header.get(fid), Struct):
                _set_integer(header.get(fid), 1, rng.choice(HUGE))  # its value count
    header_bytes = _encode_struct(header)
    delta = len(header_bytes) - reader.pos
    body = body[:start] + header_bytes + body[start + reader.pos :]
    for other in _chunk_metas(metadata):
        for fid in (9, 11):  # data and dictionary page offsets past the header move with it
            if fid in other.fields and other.get(fid) > start:
                other.set(fid, other.get(fid) + delta)
    meta.set(7, meta.get(7) + delta)
    return join_footer(body, metadata)


def _encode_struct(value: Struct) -> bytes:
    return join_footer(b"", value)[:-8]  # without the length and magic it appends


PARQUET_MUTATIONS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "flip": flip_bytes,
    "flip-footer": flip_footer,
    "truncate": truncate,
    "footer-length": footer_length,
    "magic": magic,
    "footer-integer": _footer_edit(_any_integer),
    "codec": _footer_edit(_codec),
    "encryption": _footer_edit(_encryption),
    "huge-sizes": _footer_edit(_huge_sizes),
    "schema": _footer_edit(_schema),
    "page-header": page_header,
}


# CSV mutations.


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _at_random_line(data: bytes, rng: random.Random, edit: Callable[[bytes], bytes]) -> bytes:
    lines = _lines(data)
    index = rng.randrange(len(lines))
    lines[index] = edit(lines[index])
    return b"\n".join(lines)


def _insert(data: bytes, rng: random.Random, piece: bytes) -> bytes:
    position = rng.randrange(len(data) + 1)
    return data[:position] + piece + data[position:]


CSV_MUTATIONS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "flip": flip_bytes,
    "truncate": truncate,
    "nul": lambda d, r: _insert(d, r, b"\x00"),
    "quote": lambda d, r: _insert(d, r, r.choice([b'"', b'""', b'"x"y', b'\\"'])),
    "backslash-escape": lambda d, r: _at_random_line(
        d, r, lambda line: line + b',"some \\"escaped\\" value"'
    ),
    "bare-cr": lambda d, r: d.replace(b"\n", b"\r"),
    "crlf": lambda d, r: d.replace(b"\n", b"\r\n"),
    "bad-utf8": lambda d, r: _insert(d, r, r.choice([b"\xff", b"\xc3", b"\xed\xa0\x80"])),
    "bom": lambda d, r: b"\xef\xbb\xbf" + d,
    "header-control": lambda d, r: d.replace(b",", b",\x07", 1),
    "duplicate-column": lambda d, r: _lines(d)[0].split(b",")[0] + b"," + d,
    "json-head": lambda d, r: r.choice([b"[", b"{", b" ["]) + d,
    "drop-header": lambda d, r: b"\n".join(_lines(d)[1:]),
    "ragged": lambda d, r: _at_random_line(d, r, lambda line: line + b",1,2"),
    "pii": lambda d, r: _at_random_line(
        d, r, lambda line: line.replace(b",", b",jane.doe@example.com ", 1)
    ),
    "wide-header": lambda d, r: (
        b",".join(b"c%d" % i for i in range(r.choice([300, 5000]))) + b"\n" + d
    ),
    "blank": lambda d, r: r.choice([b"", b"\n\n", b"   "]),
}


def mutants(count: int, seed: int, limit: int, first: int = 0) -> list[Mutant]:
    """`count` mutated files, numbers `first`.., the same for the same `seed` (see module).

    `limit`: the server's upload size limit (one file in 40 passes it)."""
    corpus = seeds()
    by_kind = {kind: [s for s in corpus if s.kind == kind] for kind in ("csv", "parquet")}
    out = []
    for index in range(first, first + count):
        rng = random.Random(seed * 1_000_003 + index)
        base = rng.choice(by_kind["csv" if rng.random() < CSV_SHARE else "parquet"])
        table = PARQUET_MUTATIONS if base.kind == "parquet" else CSV_MUTATIONS
        data = base.data
        applied = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            name = rng.choice(sorted(table))
            data = table[name](data, rng)
            applied.append(name)
        if rng.random() < 1 / 40:
            data = past_the_limit(data, rng, limit)
            applied.append("past-the-limit")
        suffix = ".parquet" if base.kind == "parquet" else ".csv"
        if rng.random() < 0.05:  # the other format's name
            suffix = ".csv" if suffix == ".parquet" else ".parquet"
            applied.append("other-name")
        out.append(
            Mutant(
                index,
                base.name,
                tuple(applied),
                f"fuzz{index}{suffix}",
                data,
                base.target,
                base.inputs,
            )
        )
    return out
