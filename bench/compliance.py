"""Benchmark: the pipeline's data-spec compliance check of a 1,000,000-row Parquet contribution.

    python bench/compliance.py                 # demo data-spec, temp files, no server needed
    python bench/compliance.py --rows 200000 --repeats 3

The file is written as the contributions endpoint writes one (typed columns, zstd), with a
known share of rows broken. Prints `figure: value` lines and, last, `ratio: X` = time of the
compliance check of the file (reading it with pyarrow included) ÷ time of reading it with
pyarrow alone, the median of pairs measured one after the other (goal ≤ 3). Also: the same
check of the CSV form and of the pandas frame the pipeline's quality step holds.
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
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.checks.batch import count_spec_violations
from pipeline.intake.parquet_rows import arrow_schema_for
from pipeline.models.definitions import demo_definition

CONTRACTS = ["month-to-month", "one-year", "two-year"]
METHODS = ["card", "bank-transfer", "electronic-check", "mailed-check"]
BROKEN_EVERY = 997  # one row in 997 breaks a rule of the data-spec
# As the pipeline reads CSV (pipeline/store/reading.py): an empty field is a missing cell.
CSV_OPTIONS = pacsv.ConvertOptions(strings_can_be_null=True)


def make_table(n: int, data_spec: dict[str, Any], seed: int = 7) -> tuple[pa.Table, int]:
    """Demo-model rows, column by column, and how many of them fail the data-spec."""
    rng = np.random.default_rng(seed)
    tenure = rng.integers(0, 121, n)
    charges = np.round(rng.uniform(10, 300, n), 2)
    calls = rng.integers(0, 21, n)
    broken = np.arange(0, n, BROKEN_EVERY)
    kinds = np.arange(len(broken)) % 3
    tenure[broken[kinds == 0]] = 500  # above maximum
    charges[broken[kinds == 1]] = -1.0  # below minimum
    contract = np.array(CONTRACTS, dtype=object)[rng.integers(0, 3, n)]
    contract[broken[kinds == 2]] = "weekly"  # not in enum
    method = np.array(METHODS, dtype=object)[rng.integers(0, 4, n)]
    method[rng.random(n) < 0.05] = None  # optional, sometimes absent
    columns = {
        "tenure_months": tenure,
        "monthly_charges": charges,
        "contract": contract,
        "payment_method": method,
        "support_calls": calls,
        "has_fiber": rng.random(n) < 0.5,
        "churned": rng.integers(0, 2, n),
    }
    return pa.table(columns, schema=arrow_schema_for(data_spec)), len(broken)


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def median_time(action: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    runs = [timed(action) for _ in range(repeats)]
    return statistics.median(t for t, _ in runs), runs[-1][1]


def run(n_rows: int, repeats: int) -> None:
    spec = demo_definition().data_spec
    table, expected = make_table(n_rows, spec)
    with tempfile.TemporaryDirectory(prefix="mk-bench-compliance-") as tmp:
        parquet = Path(tmp) / "rows.parquet"
        pq.write_table(table, parquet, compression="zstd")
        csv = Path(tmp) / "rows.csv"
        pacsv.write_csv(table, csv)
        del table

        # Reading and checking alternate, so both see the same load on a shared machine;
        # the ratio is the median of the pairs.
        reads, checks = [], []
        for _ in range(repeats):
            read_time, read = timed(lambda: pq.read_table(parquet))
            check_time, found = timed(
                lambda: count_spec_violations(pq.read_table(parquet), spec, 65_536)
            )
            reads.append(read_time)
            checks.append(check_time)
        read_seconds, check_seconds = statistics.median(reads), statistics.median(checks)
        ratio = statistics.median(c / r for c, r in zip(checks, reads, strict=True))
        in_memory_seconds, _ = median_time(
            lambda: count_spec_violations(read, spec, 65_536), repeats
        )
        frame = read.to_pandas()
        frame_seconds, frame_found = median_time(
            lambda: count_spec_violations(frame, spec, 65_536), repeats
        )
        csv_read_seconds, _ = median_time(
            lambda: pacsv.read_csv(csv, convert_options=CSV_OPTIONS), repeats
        )
        csv_check_seconds, csv_found = median_time(
            lambda: count_spec_violations(
                pacsv.read_csv(csv, convert_options=CSV_OPTIONS), spec, 65_536
            ),
            repeats,
        )
        sizes = (parquet.stat().st_size, csv.stat().st_size)
    if not found == frame_found == csv_found == expected:
        raise SystemExit(f"wrong count: {found}, {frame_found}, {csv_found} != {expected}")
    print(f"rows: {n_rows}")
    print(f"repeats: {repeats}")
    print(f"parquet_mb: {sizes[0] / 1e6:.1f}")
    print(f"violations_found: {found} (expected {expected})")
    print(f"parquet_read_seconds_median: {read_seconds:.4f}")
    print(f"parquet_check_seconds_median: {check_seconds:.4f}")
    print(f"check_of_table_in_memory_seconds_median: {in_memory_seconds:.4f}")
    print(f"check_of_pandas_frame_seconds_median: {frame_seconds:.4f}")
    print(f"check_rows_per_second: {n_rows / check_seconds:.0f}")
    print(f"csv_mb: {sizes[1] / 1e6:.1f}")
    print(f"csv_read_seconds_median: {csv_read_seconds:.4f}")
    print(f"csv_check_seconds_median: {csv_check_seconds:.4f}")
    print(f"ratio: {ratio:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    run(args.rows, args.repeats)


if __name__ == "__main__":
    main()
