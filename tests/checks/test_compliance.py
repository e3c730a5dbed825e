"""Data-spec compliance of whole tables (pipeline/checks/compliance.py) against row-by-row meaning.

The reference is the definition itself: each row read as the JSON object of its non-null
cells, NaN/±Infinity never valid, checked by python-jsonschema. Tables are scikit-learn's
bundled wine data (real measurements) with cells broken on purpose, in several Arrow types.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from jsonschema import Draft202012Validator, FormatChecker
from sklearn.datasets import load_wine

from pipeline.checks.batch import count_spec_violations
from pipeline.checks.compliance import count_violations, violations

CULTIVARS = ["barolo", "grignolino", "barbera"]


def wine_rows() -> list[dict[str, Any]]:
    data = load_wine(as_frame=True).frame
    rows = []
    for i, record in enumerate(data.to_dict(orient="records")):
        target = int(record.pop("target"))
        row: dict[str, Any] = {
            name.replace("/", "_"): float(value) for name, value in record.items()
        }
        row["cultivar"] = CULTIVARS[target]
        row["target"] = target
        row["magnesium"] = int(row["magnesium"])
        row["lot"] = f"L-{i:04d}"
        row["organic"] = i % 3 == 0
        rows.append(row)
    return rows


def wine_spec(rows: list[dict[str, Any]]) -> dict[str, Any]:
    frame = pd.DataFrame(rows)
    numbers = [c for c in frame.columns if frame[c].dtype == float]
    properties: dict[str, Any] = {
        name: {"type": "number", "minimum": float(frame[name].min()),
               "maximum": float(frame[name].max()), "description": "measured"}
        for name in numbers
    }  # fmt: skip
    properties["alcohol"]["exclusiveMaximum"] = 15.0
    properties["magnesium"] = {"type": "integer", "minimum": 70, "maximum": 162}
    properties["cultivar"] = {"type": "string", "enum": CULTIVARS}
    properties["target"] = {"type": ["integer", "null"], "enum": [0, 1, 2.0]}
    properties["lot"] = {"type": "string", "minLength": 6, "maxLength": 6}
    properties["organic"] = {"type": "boolean"}
    properties["grade"] = {"const": "A"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "required": ["alcohol", "magnesium", "cultivar", "target"],
        "properties": properties,
    }


def reference_count(table: pa.Table, spec: dict[str, Any]) -> int:
    validator = Draft202012Validator(spec, format_checker=FormatChecker())
    failing = 0
    for record in table.to_pylist():
        row = {k: v for k, v in record.items() if v is not None}
        if any(isinstance(v, float) and not math.isfinite(v) for v in row.values()):
            failing += 1
        else:
            failing += not validator.is_valid(row)
    return failing


def broken(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """The rows with about a third of them broken in one of many ways (or made absent)."""
    rng = random.Random(seed)
    out = [dict(r) for r in rows]
    for row in out:
        roll = rng.random()
        if roll < 0.03:
            row["alcohol"] = 99.0  # above maximum
        elif roll < 0.06:
            row["magnesium"] = None  # required, missing
        elif roll < 0.09:
            row["cultivar"] = "merlot"  # not in enum
        elif roll < 0.12:
            row["ash"] = float("nan")
        elif roll < 0.15:
            row["hue"] = float("-inf")
        elif roll < 0.18:
            row["lot"] = "L-1"  # too short
        elif roll < 0.21:
            row["grade"] = "B"  # const
        elif roll < 0.24:
            row["grade"] = "A"  # fine
        elif roll < 0.27:
            row["alcohol"] = 15.0  # exclusiveMaximum
        elif roll < 0.30:
            row["payment"] = "cash"  # additionalProperties false
        elif roll < 0.33:
            row["target"] = None  # required
        elif roll < 0.36:
            row["malic_acid"] = None  # optional: absent is fine
    return out


def as_table(rows: list[dict[str, Any]], variant: str) -> pa.Table:
    table = pa.Table.from_pylist(rows)
    if variant == "narrow":
        table = table.cast(
            pa.schema(
                [
                    pa.field(f.name, pa.float32())
                    if f.type == pa.float64()
                    else pa.field(f.name, pa.int32())
                    if f.type == pa.int64()
                    else pa.field(f.name, pa.large_string())
                    if f.type == pa.string()
                    else f
                    for f in table.schema
                ]
            )
        )
    if variant == "dictionary":
        table = table.set_column(
            table.column_names.index("cultivar"),
            "cultivar",
            pa.compute.dictionary_encode(table.column("cultivar")),
        )
    if variant == "float-target":
        index = table.column_names.index("target")
        table = table.set_column(index, "target", table.column("target").cast(pa.float64()))
    return table


@pytest.mark.parametrize("variant", ["plain", "narrow", "dictionary", "float-target"])
@pytest.mark.parametrize("seed", [1, 2])
def test_arrow_check_counts_what_the_row_meaning_counts(variant: str, seed: int) -> None:
    rows = wine_rows()
    spec = wine_spec(rows)
    table = as_table(broken(rows, seed), variant)
    expected = reference_count(table, spec)
    assert 40 < expected < 120  # the mutations did hit rows
    assert count_violations(table, spec) == expected


def test_clean_real_rows_comply() -> None:
    rows = wine_rows()
    assert count_violations(pa.Table.from_pylist(rows), wine_spec(rows)) == 0


def test_integral_floats_count_as_integers_and_fractions_do_not() -> None:
    spec = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 5}}}
    table = pa.table({"n": pa.array([1.0, 2.5, None, 7.0, 3.0])})
    assert violations(table, spec).tolist() == [False, True, False, True, False]


def test_keywords_arrow_cannot_express_fall_back_to_the_row_validator() -> None:
    rows = wine_rows()
    spec = wine_spec(rows)
    spec["properties"]["lot"] = {"type": "string", "pattern": "^L-0[0-9]{3}$"}
    spec["properties"]["magnesium"] = {"type": "integer", "multipleOf": 2}
    spec["properties"]["checked_on"] = {"type": "string", "format": "date"}
    broken_rows = broken(rows, 3)
    for i, row in enumerate(broken_rows):
        row["checked_on"] = "2024-02-30" if i % 17 == 0 else "2024-02-10"
    table = pa.Table.from_pylist(broken_rows)
    expected = reference_count(table, spec)
    assert count_violations(table, spec) == expected
    assert expected > reference_count(pa.Table.from_pylist(broken(rows, 3)), wine_spec(rows))


@pytest.mark.parametrize(
    "root",
    [
        {"dependentRequired": {"organic": ["lot"]}},
        {"allOf": [{"properties": {"alcohol": {"maximum": 14}}}]},
        {"patternProperties": {"^pay": {"type": "string"}}},
    ],
)
def test_root_keywords_validate_whole_rows(root: dict[str, Any]) -> None:
    rows = wine_rows()
    spec = {**wine_spec(rows), **root}
    broken_rows = broken(rows, 4)
    for i, row in enumerate(broken_rows):
        if i % 11 == 0:
            row["lot"] = None
    table = pa.Table.from_pylist(broken_rows)
    assert count_violations(table, spec) == reference_count(table, spec)


def test_additional_properties_schema_checks_extra_columns() -> None:
    spec = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "additionalProperties": {"type": "number", "maximum": 1},
    }
    table = pa.table({"a": [1, 2, 3], "x": [0.5, 2.0, None], "y": ["s", None, None]})
    assert violations(table, spec).tolist() == [True, True, False]


def test_a_required_column_that_is_absent_fails_every_row() -> None:
    spec = {"type": "object", "required": ["b"], "properties": {"a": {"type": "integer"}}}
    assert count_violations(pa.table({"a": [1, 2]}), spec) == 2


def test_columns_without_a_json_type_are_read_as_iso_text() -> None:
    import datetime as dt

    spec: dict[str, Any] = {
        "type": "object",
        "properties": {"day": {"type": "string", "format": "date"}},
    }
    table = pa.table({"day": pa.array([dt.date(2024, 1, 2), None], type=pa.date32())})
    assert count_violations(table, spec) == 0
    spec["properties"]["day"] = {"type": "integer"}
    assert count_violations(table, spec) == 1


def test_the_pipeline_counts_a_frame_as_arrow_does_with_nan_as_missing() -> None:
    rows = wine_rows()
    spec = wine_spec(rows)
    frame = pd.DataFrame(broken(rows, 5))
    as_arrow = pa.Table.from_pandas(frame, preserve_index=False)
    # pandas has one missing value, NaN: Arrow reads it as a missing cell.
    assert count_spec_violations(frame, spec, batch_size=50) == reference_count(as_arrow, spec)
    assert count_spec_violations(as_arrow, spec, batch_size=50) == reference_count(as_arrow, spec)


def test_a_frame_arrow_cannot_type_is_checked_row_by_row() -> None:
    spec = {"type": "object", "properties": {"a": {"type": "integer"}}}
    frame = pd.DataFrame({"a": np.array([1, "x", 2.5, None], dtype=object)})
    assert count_spec_violations(frame, spec, batch_size=2) == 2
