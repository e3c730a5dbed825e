"""Benchmark: the CSV text check (control bytes, RFC 4180 quotes) against the parse it guards.

    python bench/csv_text.py                 # a 200 MiB temp CSV, in process
    python bench/csv_text.py --mib 50 --repeats 5

Writes `bench/upload.py`'s CSV (the demo model's columns and a free-text `note` that pyarrow
quotes in every row, as it holds a comma: the dear case for the check), then times, alternately,
over the same bytes read in the upload's 1 MiB chunks:
  check:    `pipeline.store.csv_text.CsvTextCheck.feed` of every chunk, then `finish`;
  baseline: pyarrow's streaming CSV reader reading every column as text, the parse the upload's
            checking thread does (`pipeline.intake.profiles.profile_csv`), in 1 MiB blocks.
The check runs in the upload's writing thread, beside the parse; its cost is paid once per file.
Also times the check of the same file with its quotes removed (no quoted field: the common case
of number and category columns).

Prints `figure: value` lines and, last, `ratio: X` = check seconds ÷ baseline seconds, the median
of the pairs (goal ≤ 0.3).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.upload import generate_csv
from pipeline.store.csv_text import CsvTextCheck

CHUNK = 1024 * 1024


def chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            yield chunk


def check(path: Path) -> float:
    started = time.perf_counter()
    text_check = CsvTextCheck()
    for chunk in chunks(path):
        text_check.feed(chunk)
    text_check.finish()
    return time.perf_counter() - started


def parse(path: Path) -> float:
    started = time.perf_counter()
    with closing(path.open("rb")) as stream:
        with path.open("rb") as head:
            header = head.readline().decode().rstrip("\r\n").split(",")
        reader = pacsv.open_csv(
            stream,
            read_options=pacsv.ReadOptions(block_size=CHUNK, use_threads=False),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(header, pa.string()), strings_can_be_null=True
            ),
        )
        for _ in reader:
            pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=200, help="size of the CSV (default 200)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating pairs (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-csv-text-") as tmp:
        path = Path(tmp) / "bench.csv"
        rows = generate_csv(path, args.mib * CHUNK)
        plain = Path(tmp) / "plain.csv"
        with plain.open("wb") as out:
            for chunk in chunks(path):
                out.write(chunk.replace(b'"', b""))
        size = path.stat().st_size
        print(f"rows: {rows}")
        print(f"file_mib: {size / CHUNK:.1f}")
        quotes = sum(chunk.count(b'"') for chunk in chunks(path))
        print(f"quotes: {quotes}")
        checks, parses, ratios = [], [], []
        for _ in range(args.repeats):
            checks.append(check(path))
            parses.append(parse(path))
            ratios.append(checks[-1] / parses[-1])
        plain_seconds = min(check(plain) for _ in range(args.repeats))
        print(f"check_seconds: {min(checks):.3f}")
        print(f"check_ms_per_mib: {min(checks) * 1000 / (size / CHUNK):.3f}")
        print(f"check_without_quotes_ms_per_mib: {plain_seconds * 1000 / (size / CHUNK):.3f}")
        print(f"baseline_parse_seconds: {min(parses):.3f}")
        print(f"ratio: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
