"""Issue 33, cases 2 to 8: what the API accepts is stored whole and passes the pipeline's check,
and the data-spec means what JSON Schema 2020-12 says (test_schema_suite.py runs the suite)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.checks.batch import count_spec_violations
from pipeline.checks.compliance import count_violations
from pipeline.core.errors import InvalidInput, RowValidationFailed
from pipeline.intake.contributions import ModelSnapshot, check_rows
from pipeline.intake.jsonrows import split_body
from pipeline.intake.parquet_rows import table_to_parquet_bytes
from pipeline.models.dataspec import RowValidator, check_schema
from pipeline.store.json_columns import decode_json_cell, json_columns
from pipeline.store.reading import read_dataset
from tests.support.schema_suite import SUITE

_models = iter(range(20_000, 30_000))


def accepted(spec: dict[str, Any], rows: list[Any]) -> Any:
    """The table the contributions endpoint stores for `rows` (raises what it raises)."""
    body = split_body(json.dumps({"rows": rows}).encode())
    assert body.rows is not None
    return check_rows(ModelSnapshot(next(_models), 1, spec), body.rows)


def stored(tmp_path: Path, spec: dict[str, Any], rows: list[Any]) -> tuple[list[dict], int]:
    """The rows as stored (JSON-text cells decoded) and the pipeline's violation count."""
    path = tmp_path / "rows.parquet"
    table = accepted(spec, rows)
    path.write_bytes(table_to_parquet_bytes(table))
    frame = read_dataset(path, "parquet")
    encoded = json_columns(table.schema)
    back = [
        {k: decode_json_cell(v) if k in encoded else v for k, v in row.items() if v is not None}
        for row in table.to_pylist()
    ]
    return back, count_spec_violations(frame, spec, 100)


def test_case2_values_under_an_unpinned_type_are_stored_with_their_type(tmp_path: Path) -> None:
    spec = {
        "type": "object",
        "properties": {
            "n": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "c": {"const": True},
            "r": {"$ref": "#/$defs/ratio"},
            "m": {"allOf": [{"minimum": 0}]},
            "t": {"if": {"type": "string"}, "then": {"minLength": 2}},
        },
        "$defs": {"ratio": {"type": "number"}},
    }
    rows = [
        {"n": 5, "c": True, "r": 0.5, "m": 3, "t": "ab"},
        {"n": 7, "c": True, "r": 2, "m": 4.5, "t": 9},
    ]
    back, violations = stored(tmp_path, spec, rows)
    assert violations == 0
    assert back == rows
    assert type(back[0]["n"]) is int and type(back[0]["c"]) is bool and back[1]["t"] == 9


def test_case3_members_the_data_spec_does_not_name_are_kept(tmp_path: Path) -> None:
    spec = {
        "type": "object",
        "allOf": [{"properties": {"foo": {"type": "string"}}}],
        "properties": {"id": {"type": "integer"}},
    }
    rows = [{"id": 1, "foo": "baz", "bar": 2}, {"id": 2, "foo": "qux", "deep": {"a": [1]}}]
    back, violations = stored(tmp_path, spec, rows)
    assert violations == 0
    assert back == rows


def test_a_contribution_with_nothing_to_store_is_refused() -> None:
    with pytest.raises(RowValidationFailed) as caught:
        accepted({"type": "object"}, [{}, {}])
    assert caught.value.errors == [
        {"path": "rows", "message": "every row is an empty object", "rowIndex": -1}
    ]


def test_case4_a_ref_into_properties_is_followed_by_the_arrow_check() -> None:
    import pyarrow as pa

    spec = {
        "type": "object",
        "properties": {"foo": {"type": "integer"}, "bar": {"$ref": "#/properties/foo"}},
    }
    table = pa.table({"foo": pa.array([1, 2, 3]), "bar": pa.array([3, None, 4])})
    assert count_violations(table, spec) == 0
    text = pa.table({"foo": pa.array([1, 2]), "bar": pa.array(["x", None])})
    assert count_violations(text, spec) == 1


def test_case5_a_row_against_the_meta_schema_is_a_400_not_a_500() -> None:
    spec = {
        "type": "object",
        "properties": {
            "g0": {"$id": "urn:example:g0", "$ref": "https://json-schema.org/draft/2020-12/schema"}
        },
    }
    check_schema(spec)
    with pytest.raises(RowValidationFailed) as caught:
        accepted(spec, [{"g0": {"$defs": {"foo": {"type": 1}}}}, {"g0": {"type": "string"}}])
    errors = caught.value.errors
    assert errors and {e["rowIndex"] for e in errors} == {0}
    assert all(e["path"].startswith("rows[0].g0") and e["message"] for e in errors)


def test_case6_ecma_262_patterns_are_accepted_and_applied() -> None:
    for pattern, good, bad in ((r"^\p{Letter}+$", "héllo", "h1"), (r"^\cC$", "\x03", "C")):
        spec = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}
        check_schema(spec)
        validator = RowValidator(spec)
        assert validator.is_valid({"s": good}) and not validator.is_valid({"s": bad})
        errors = validator.errors_for([{"s": bad}])
        assert [e.path for e in errors] == ["rows[0].s"]


def test_case7_a_dialect_other_than_2020_12_is_refused() -> None:
    # The draft-07 suite's "$ref beside other keywords": 2020-12 would apply both.
    groups = json.loads((SUITE / "draft7" / "ref.json").read_text())
    schema = next(
        g["schema"] for g in groups if g["description"] == "ref overrides any sibling keywords"
    )
    for dialect in ("http://json-schema.org/draft-07/schema#", "https://example.com/own"):
        spec = {"$schema": dialect, "type": "object", "properties": {"v": schema}}
        with pytest.raises(InvalidInput, match="only JSON Schema draft 2020-12"):
            check_schema(spec)
        nested = {"type": "object", "properties": {"v": {"$id": "urn:v", "$schema": dialect}}}
        with pytest.raises(InvalidInput, match="only JSON Schema draft 2020-12"):
            check_schema(nested)
    # 2020-12 itself, or no `$schema`; a `$schema` member inside a value names no dialect.
    plain = {"type": "object", "properties": {"v": {"const": {"$schema": "draft-07"}}}}
    check_schema(plain)
    check_schema({"$schema": "https://json-schema.org/draft/2020-12/schema", **plain})


def test_case8_a_whole_float_length_is_enforced_by_the_arrow_check() -> None:
    import pyarrow as pa

    spec = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 2.0}}}
    table = pa.table({"s": ["ab", "abc", "💩💩"]})
    assert count_violations(table, spec) == 1
    assert count_violations(table, {**spec, "properties": {"s": {"minLength": 3.0}}}) == 2


def test_a_null_member_is_an_absent_one_everywhere(tmp_path: Path) -> None:
    # A stored cell cannot tell null from absent, and the pipeline reads it as absent: the
    # API judges it so too, or it would accept rows the pipeline then refuses.
    spec = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": ["integer", "null"]}},
        "required": ["b"],
    }
    with pytest.raises(RowValidationFailed) as caught:
        accepted(spec, [{"a": None, "b": None}])
    assert [e["path"] for e in caught.value.errors] == ["rows[0].b"]
    back, violations = stored(tmp_path, spec, [{"a": None, "b": 1}])
    assert back == [{"b": 1}] and violations == 0
