"""Benchmark: the PII scan of every value of a 1,000,000-row CSV with two text columns.

    python bench/piiscan.py                  # temp files, in process, no server needed
    python bench/piiscan.py --rows 200000 --repeats 1

Writes a CSV shaped like a support-ticket export: numbers, a free-text `note` (distinct per row)
and a `contact` column (agents and channels; 0.1 % of rows name one of 500 order numbers, which
look like phone numbers; 0.1 % of rows hold an e-mail address, phone number, card number or
IBAN, spread through the file and both columns), reads it with pyarrow as the pipeline does, then
times, alternately, on the same two columns in memory:
  scan:     the project's scan (`pipeline.checks.pii_tables.scan_table`): every value through the
            Arrow pre-filter, the distinct candidates confirmed by Presidio;
  baseline: one `pyarrow.compute.match_substring_regex` pass per entity pattern the scanner
            knows (`pipeline.checks.pii_prefilter.PATTERNS`) over each column.
Presidio's analyzer is loaded before either is timed. Also prints the same scan through the
upload intake's path (the CSV streamed block by block, `profile_path`) and through the
pipeline's (`scan_frame` over the pandas frame).

Prints `figure: value` lines and, last, `ratio: X` = scan seconds ÷ baseline seconds, the median
of the pairs (goal ≤ 2).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.checks import pii
from pipeline.checks.pii_prefilter import PATTERNS
from pipeline.checks.pii_scan import PiiScanner
from pipeline.checks.pii_tables import scan_frame, scan_table
from pipeline.core.config import Settings
from pipeline.intake.profiles import profile_path
from pipeline.store.reading import read_dataset

TEXT_COLUMNS = ["note", "contact"]
PII_EVERY = 1000  # one row in 1000 holds PII
ORDER_EVERY = 1000  # one row in 1000 names an order number (a phone candidate, not PII)
PHRASES = [
    "printer jams again",
    "cannot log in after the update",
    "vpn drops every hour, please check",
    "invoice shows the wrong amount",
    "asked for a discount on the yearly plan",
    "screen flickers when docked",
    "upgraded to fiber optic",
    "refund requested, item arrived damaged",
]
CITIES = ["Lyon", "Porto", "Leeds", "Graz", "Turin", "Ghent", "Cork", "Brno", "Oslo", "Bari"]
AGENTS = ["Marta", "Jonas", "Priya", "Tomás", "Aiko", "Kwame", "Lena", "Omar"]
CHANNELS = ["chat", "phone", "e-mail", "portal", "shop"]


def pii_text(index: int) -> tuple[str, str]:
    """(entity type, text) of the index-th planted value; every one distinct."""
    kind = index % 4
    if kind == 0:
        return "EMAIL_ADDRESS", f"write to customer{index}@example.com, thanks"
    if kind == 1:
        return "PHONE_NUMBER", f"call back on +1 212-555-{index % 10000:04d}, evenings"
    if kind == 2:
        return "CREDIT_CARD", f"paid with 4111 1111 1111 1111, ref {index}"
    return "IBAN_CODE", f"refund to DE89 3704 0044 0532 0130 00, case {index}"


def make_table(rows: int, seed: int = 5) -> tuple[pa.Table, dict[str, dict[str, int]]]:
    """The rows, and the findings a correct scan reports (distinct values per column)."""
    rng = np.random.default_rng(seed)
    phrase = np.array(PHRASES, dtype=object)[rng.integers(0, len(PHRASES), rows)]
    city = np.array(CITIES, dtype=object)[rng.integers(0, len(CITIES), rows)]
    note_values: list[Any] = [
        f"ticket {i}, {p}, {c}" for i, p, c in zip(range(rows), phrase, city, strict=True)
    ]
    agent = np.array(AGENTS, dtype=object)[rng.integers(0, len(AGENTS), rows)]
    channel = np.array(CHANNELS, dtype=object)[rng.integers(0, len(CHANNELS), rows)]
    contact = np.array([f"{a} via {c}" for a, c in zip(agent, channel, strict=True)], dtype=object)
    orders = np.arange(0, rows, ORDER_EVERY)
    contact[orders] = [f"order ORD-2024-{i // ORDER_EVERY % 500 * 317:06d}" for i in orders]
    expected: dict[str, dict[str, int]] = {}
    for number, row in enumerate(range(PII_EVERY // 2, rows, PII_EVERY)):
        entity, text = pii_text(number)
        column = TEXT_COLUMNS[number // 4 % 2]
        if column == "note":
            note_values[row] = text
        else:
            contact[row] = text
        counts = expected.setdefault(column, {})
        counts[entity] = counts.get(entity, 0) + 1
    table = pa.table(
        {
            "wait_minutes": rng.integers(0, 240, rows),
            "amount": np.round(rng.uniform(5, 500, rows), 2),
            "note": pa.array(note_values, pa.string()),
            "contact": pa.array(contact, pa.string()),
            "escalated": rng.integers(0, 2, rows),
        }
    )
    return table, expected


def baseline(columns: list[pa.ChunkedArray]) -> int:
    """One match_substring_regex pass per pattern over each column; the matches counted."""
    matched = 0
    for column in columns:
        for pattern in PATTERNS.values():
            matched += pc.sum(pc.match_substring_regex(column, pattern)).as_py() or 0
    return matched


def split_seconds(text: pa.Table, settings: Settings) -> tuple[float, float]:
    """The scan again in its two parts: the pre-filter of every value, Presidio's confirmation."""
    scanner = PiiScanner(settings, TEXT_COLUMNS)
    started = time.perf_counter()
    for name in TEXT_COLUMNS:
        for chunk in text.column(name).chunks:
            scanner.add(name, chunk)
    scanner.flush()
    prefiltered = time.perf_counter()
    scanner.report()
    return prefiltered - started, time.perf_counter() - prefiltered


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def run(rows: int, repeats: int) -> None:
    settings = Settings()
    started = time.perf_counter()
    table, expected = make_table(rows)
    with tempfile.TemporaryDirectory(prefix="mk-bench-piiscan-") as tmp:
        path = Path(tmp) / "tickets.csv"
        pacsv.write_csv(table, path)
        del table
        print(f"generate_seconds: {time.perf_counter() - started:.2f}")
        print(f"rows: {rows}")
        print(f"csv_mb: {path.stat().st_size / 1024 / 1024:.1f}")
        pii.warm_up()
        read_seconds, frame = timed(lambda: read_dataset(path, "csv"))
        text = pa.table({name: pa.array(frame[name], pa.string()) for name in TEXT_COLUMNS})
        columns = [text.column(name) for name in TEXT_COLUMNS]
        scans, bases = [], []
        report = None
        for _ in range(repeats):
            scan_s, report = timed(lambda: scan_table(text, settings))
            base_s, _ = timed(lambda: baseline(columns))
            scans.append(scan_s)
            bases.append(base_s)
        assert report is not None
        prefilter_seconds, presidio_seconds = split_seconds(text, settings)
        frame_seconds, frame_report = timed(lambda: scan_frame(frame, settings))
        intake_seconds, profile = timed(lambda: profile_path(path, settings))
        confirm_seconds, intake_report = timed(profile.pii_report)
    if not report.findings == frame_report.findings == intake_report.findings == expected:
        raise SystemExit(f"wrong findings: {report.findings} != {expected}")
    ratio = statistics.median(s / b for s, b in zip(scans, bases, strict=True))
    print(f"text_values: {report.scanned_values}")
    print(f"candidate_values: {report.candidate_values}")
    print(f"confirmed_distinct_values: {report.confirmed_values}")
    print(f"findings: {report.summary()}")
    print(f"read_csv_seconds: {read_seconds:.2f}")
    print(f"baseline_seconds_median: {statistics.median(bases):.2f}")
    print(f"scan_seconds_median: {statistics.median(scans):.2f}")
    print(f"scan_values_per_second: {report.scanned_values / statistics.median(scans):.0f}")
    print(f"scan_prefilter_seconds: {prefilter_seconds:.2f} (every value, both columns)")
    print(f"scan_presidio_seconds: {presidio_seconds:.2f} (the distinct candidates)")
    print(f"pipeline_scan_frame_seconds: {frame_seconds:.2f}")
    print(f"intake_profile_seconds: {intake_seconds:.2f} (CSV streamed and pre-filtered)")
    print(f"intake_confirm_seconds: {confirm_seconds:.2f}")
    print(f"ratio: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    run(args.rows, args.repeats)


if __name__ == "__main__":
    main()
