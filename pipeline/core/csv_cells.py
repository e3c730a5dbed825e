"""CSV written by the service: cells a spreadsheet cannot run as formulas (CSV injection).

A spreadsheet reads a cell that starts with `=`, `+`, `-` or `@` as a formula, and a leading tab
or carriage return can hide such a start; OWASP's advice is to prefix those cells with a single
quote, which spreadsheets show as text. Values that are numbers are written as they are: a
negative number is data, and `-1.5` is not a formula. Every CSV the service writes (the example
CSV of a model's data-spec, the demo files) goes through `write_csv`.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from typing import IO, Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_text(text: str) -> str:
    """`text`, prefixed with `'` when a spreadsheet would read it as a formula."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_cell(value: Any) -> str:
    """A value as one CSV cell: empty for null, true/false, JSON for objects and arrays."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (dict, list)):
        return safe_text(json.dumps(value))
    return safe_text(str(value))


def write_csv(
    handle: IO[str], columns: Sequence[str], rows: Iterable[dict[str, Any]], **options: Any
) -> None:
    """A header of `columns`, then each row's cells in that order (missing keys: empty)."""
    writer = csv.writer(handle, **options)
    writer.writerow([safe_text(str(name)) for name in columns])
    writer.writerows([csv_cell(row.get(name)) for name in columns] for row in rows)
