"""`marketplace validate`: a file checked against a model's data-spec and the spec §8 thresholds.

The data-spec is fetched from the server, so a file is checked against the same JSON Schema,
with the same `rows[<i>].<field>` paths, as the server would use; the quality checks are the
server's own (pipeline/checks/quality.py), run here on the rows as the server would store them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cli.connection import handles_errors, make_client
from cli.datafiles import RowFile, read_rows
from pipeline.core.config import load_settings
from pipeline.models.dataspec import RowError, RowValidator


def file_errors(schema: dict[str, Any], rowfile: RowFile) -> list[RowError]:
    """Every failing row's errors, with the server's paths (`rows[<i>].<field>`), uncapped."""
    found = [RowError(f"rows[{i}]", message, i) for i, message in rowfile.problems]
    broken = {i for i, _ in rowfile.problems}
    found.extend(
        e for e in RowValidator(schema).iter_errors(rowfile.rows) if e.rowIndex not in broken
    )
    return sorted(found, key=lambda e: e.rowIndex)


def quality_report(
    schema: dict[str, Any], rows: list[dict[str, Any]], failing_rows: int, strict: bool
) -> Any:
    """The spec §8 checks of pipeline/checks/quality.py on the rows as the server would store
    them."""
    # pandas, the quality checks and pyarrow cost ~1 s to import: only `validate` pays it,
    # not every `marketplace` start.
    import pandas as pd

    from pipeline.checks.quality import check_quality
    from pipeline.intake.parquet_rows import rows_to_table

    settings = load_settings()
    if strict:
        settings = settings.model_copy(update={"data_validation_strict": True})
    frame = None
    if schema.get("properties"):
        try:
            frame = rows_to_table(rows, schema).to_pandas()
        except Exception:  # values that fail the data-spec may not fit its column types
            frame = None
    if frame is None:
        frame = pd.DataFrame.from_records(rows)
    return check_quality(frame, settings, schema_violations=failing_rows)


def _figure(name: str, observed: float, threshold: float) -> str:
    if name in {"completeness", "uniqueness", "column_completeness"}:
        return f"{observed * 100:.1f} % (must be above {threshold * 100:g} %)"
    if name == "row_count":
        return f"{int(observed)} rows (at least {int(threshold)})"
    return f"{int(observed)} failing rows (at most {int(threshold)})"


def print_quality(report: Any) -> None:
    print("quality checks (spec §8):")
    labels = {
        "row_count": "samples",
        "completeness": "completeness",
        "uniqueness": "uniqueness",
        "schema_compliance": "schema compliance",
    }
    for check in report.checks:
        if check.name not in labels:
            continue
        verdict = "ok" if check.passed else "FAIL"
        print(f"  {labels[check.name]:<18} {_figure(check.name, check.observed, check.threshold)}"
              f"  {verdict}")  # fmt: skip
    for check in report.warnings:
        level = "FAIL" if report.strict else "warning"
        print(
            f"  {level}: column {check.column} is "
            f"{_figure(check.name, check.observed, check.threshold)}"
        )
    print("quality: passed" if report.passed else "quality: FAILED")


@handles_errors
def cmd_validate(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        schema = client.data_spec(args.model_id)
    rowfile = read_rows(Path(args.file), schema)
    errors = file_errors(schema, rowfile)
    for error in errors:
        print(f"{error.path}: {error.message}")
    failing = len({e.rowIndex for e in errors})
    total = len(rowfile.rows)
    if failing:
        print(
            f"{failing} of {total} rows failed validation against model {args.model_id}'s data-spec"
        )
    else:
        print(f"all {total} rows match model {args.model_id}'s data-spec")
    passed = not failing
    if not args.no_quality:
        report = quality_report(schema, rowfile.rows, failing, args.strict)
        print_quality(report)
        passed = passed and report.passed
    return 0 if passed else 1
