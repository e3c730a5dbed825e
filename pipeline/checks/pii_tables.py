"""PII scan of a whole Arrow table, pandas frame or list of values, through one `PiiScanner`.

The scanner (`pipeline.checks.pii_scan`) takes columns batch by batch; these feed it every
scanned column at once. A column is scanned when it holds text (nested text included) or, by
its name, contact or payment numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.checks.pii_nested import holds_nested_text, is_text_type
from pipeline.checks.pii_numbers import holds_contact_numbers, is_number_type
from pipeline.checks.pii_scan import PiiReport, PiiScanner
from pipeline.core.config import Settings


def scanned_type(name: str, kind: pa.DataType) -> bool:
    """Whether a column of this name and type is scanned: text, or contact numbers."""
    return (
        is_text_type(kind)
        or holds_nested_text(kind, name)
        or (is_number_type(kind) and holds_contact_numbers(name))
    )


def scan_table(table: pa.Table, settings: Settings) -> PiiReport:
    """Scan every value of the text columns of an Arrow table."""
    if not settings.enable_pii_detection:
        return PiiReport(skipped=True)
    names = [f.name for f in table.schema if scanned_type(f.name, f.type)]
    scanner = PiiScanner(settings, list(dict.fromkeys(names)))
    for name in scanner.columns:
        for chunk in table.column(name).chunks:
            scanner.add(name, chunk)
    return scanner.report()


def scan_frame(
    df: pd.DataFrame, settings: Settings, columns: Sequence[str] | None = None
) -> PiiReport:
    """Scan every value of the text columns of `df` and the long numbers of its contact-number
    columns (or of those of `columns` that hold them)."""
    if not settings.enable_pii_detection:
        return PiiReport(skipped=True)
    if columns is not None:
        missing = [name for name in columns if name not in df.columns]
        if missing:
            raise ValueError(f"columns not in the frame: {', '.join(map(str, missing))}")
    wanted = set(columns) if columns is not None else None
    texts: dict[str, list[pa.Array]] = {}
    # By position: labels may repeat (a CSV header can), and df[label] would be a frame then.
    for position, name in enumerate(df.columns):
        series = df.iloc[:, position]
        if wanted is not None and name not in wanted:
            continue
        if _is_text(series):
            texts.setdefault(str(name), []).append(_as_arrow_text(series))
        elif _is_number(series) and holds_contact_numbers(str(name)):
            texts.setdefault(str(name), []).append(pa.array(series, from_pandas=True))
    scanner = PiiScanner(settings, list(texts))
    for name, arrays in texts.items():
        for array in arrays:
            scanner.add(name, array)
    return scanner.report()


def scan_values(values: Iterable[Any], settings: Settings) -> dict[str, int]:
    """Entity type -> number of distinct values holding it, over every value given."""
    if not settings.enable_pii_detection:
        return {}
    array = pa.array([_as_text(value) for value in values], pa.string())
    scanner = PiiScanner(settings, ["values"])
    scanner.add("values", array)
    return scanner.report().findings.get("values", {})


def _is_text(series: pd.Series) -> bool:
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        # Parquet dictionary columns arrive as categoricals; their categories are the values.
        dtype = dtype.categories.dtype
    # Object columns also carry JSON's nested lists and dicts, which can hide e-mails as well.
    return bool(pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype))


def _is_number(series: pd.Series) -> bool:
    dtype = series.dtype
    return bool(pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype))


def _as_arrow_text(series: pd.Series) -> pa.Array:
    if isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype(object)
    if pd.api.types.is_string_dtype(series.dtype) and not pd.api.types.is_object_dtype(
        series.dtype
    ):
        return pa.array(series, from_pandas=True)  # Arrow-backed already: no copy per value
    return pa.array([_as_text(value) for value in series], pa.string())


def _as_text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    return value if isinstance(value, str) else str(value)
