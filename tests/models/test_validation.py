"""The fast validation path (issue 10): jsonschema-rs decides, python-jsonschema explains.

Domain level, no server: pipeline/models/dataspec.py, pipeline/intake/jsonrows.py and the
column-wise Arrow build in pipeline/intake/parquet_rows.py. The endpoint's behaviour is in
test_contributions.py.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pyarrow as pa
import pytest
from jsonschema import Draft202012Validator

from pipeline.core.errors import InvalidInput, RowValidationFailed
from pipeline.intake.contributions import ModelSnapshot, check_rows
from pipeline.intake.jsonrows import ROW_CHUNK, ListRows, RawRows, split_body
from pipeline.intake.parquet_rows import MAX_UNDECLARED_MEMBERS, RowTableBuilder, rows_to_table
from pipeline.models.dataspec import RowValidator, check_schema, validator_for
from pipeline.models.definitions import demo_definition
from pipeline.store.json_columns import json_columns


def demo_rows(n: int) -> list[dict[str, Any]]:
    example = demo_definition().example_row
    out = []
    for i in range(n):
        row = copy.deepcopy(example)
        row["tenure_months"] = i % 121
        out.append(row)
    return out


def test_messages_are_python_jsonschemas_at_the_rows_own_path() -> None:
    spec = demo_definition().data_spec
    rows = demo_rows(4)
    rows[2]["tenure_months"] = 500
    rows[3]["contract"] = "weekly"
    errors = RowValidator(spec).errors_for(rows, start=10)
    expected = [
        next(Draft202012Validator(spec).iter_errors(rows[2])).message,
        next(Draft202012Validator(spec).iter_errors(rows[3])).message,
    ]
    assert [(e.path, e.message, e.rowIndex) for e in errors] == [
        ("rows[12].tenure_months", expected[0], 12),
        ("rows[13].contract", expected[1], 13),
    ]
    assert expected[0] == "500 is greater than the maximum of 120"


def test_formats_are_asserted() -> None:
    spec = {"type": "object", "properties": {"day": {"type": "string", "format": "date"}}}
    validator = RowValidator(spec)
    assert validator.is_valid({"day": "2024-02-10"})
    assert validator.invalid_indices([{"day": "2024-02-10"}, {"day": "2024-02-30"}]) == [1]


def test_a_row_only_the_fast_validator_refuses_is_explained_by_it() -> None:
    # python-jsonschema's e-mail check only looks for an "@"; jsonschema-rs checks the address.
    spec = {"type": "object", "properties": {"email": {"type": "string", "format": "email"}}}
    assert Draft202012Validator(spec).is_valid({"email": "a@"})
    errors = RowValidator(spec).errors_for([{"email": "x@example.org"}, {"email": "a@"}])
    assert [(e.path, e.rowIndex) for e in errors] == [("rows[1].email", 1)]
    assert "email" in errors[0].message


def test_values_without_a_json_form_fail_instead_of_raising() -> None:
    validator = RowValidator({"type": "object", "properties": {"a": {"type": "string"}}})
    assert not validator.is_valid({"a": b"bytes"})
    assert validator.invalid_indices([{"a": "ok"}, {"a": b"x"}, {"a": "ok"}]) == [1]
    errors = validator.errors_for([{"a": b"bytes"}])
    assert errors and errors[0].path.startswith("rows[0]")


@pytest.mark.parametrize("schema_id", [None, "urn:example:rows"])
def test_references_resolve_when_a_batch_of_rows_is_validated_at_once(
    schema_id: str | None,
) -> None:
    spec: dict[str, Any] = {
        "type": "object",
        "$defs": {"small": {"type": "integer", "maximum": 3}},
        "properties": {"a": {"$ref": "#/$defs/small"}},
    }
    if schema_id:
        spec["$id"] = schema_id
    validator = RowValidator(spec)
    assert validator._batch is not None  # the one-call path is the one under test
    assert validator.invalid_indices([{"a": 1}, {"a": 2}, {"a": 3}]) == []
    assert validator.invalid_indices([{"a": 1}, {"a": 5}, {"a": "x"}]) == [1, 2]


def test_a_data_spec_the_fast_validator_cannot_compile_is_refused() -> None:
    # A remote reference would make the server fetch a URL: never done, so never accepted.
    spec = {"type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:9/a.json"}}}
    Draft202012Validator.check_schema(spec)
    with pytest.raises(InvalidInput, match="cannot be compiled"):
        check_schema(spec)


def test_validators_are_compiled_once_per_model_and_spec_version() -> None:
    spec = demo_definition().data_spec
    first = validator_for(9001, 1, spec)
    assert validator_for(9001, 1, copy.deepcopy(spec)) is first
    assert validator_for(9001, 2, spec) is not first


# --- bodies split into raw rows --------------------------------------------------------------


def test_a_body_is_split_into_members_and_raw_rows() -> None:
    body = orjson.dumps({"modelId": 1, "benchmarkSpecId": None, "rows": demo_rows(3)})
    split = split_body(bytearray(body))
    assert split.members == {"modelId": 1, "benchmarkSpecId": None}
    assert isinstance(split.rows, RawRows) and len(split.rows) == 3
    assert [c.rows for c in split.rows.chunks()] == [demo_rows(3)]
    assert split.envelope()["rows"] == [{}]


@pytest.mark.parametrize(("rows", "stand_in"), [([], []), ({"a": 1}, {"a": 1}), (None, None)])
def test_rows_that_are_not_a_non_empty_array_reach_the_envelope_check(
    rows: Any, stand_in: Any
) -> None:
    split = split_body(orjson.dumps({"modelId": 1, "rows": rows}))
    assert split.envelope()["rows"] == stand_in
    assert "rows" not in split_body(b'{"modelId": 1}').envelope()


def test_a_broken_row_in_a_later_chunk_is_placed_by_its_own_index() -> None:
    rows = [orjson.dumps(r).decode() for r in demo_rows(ROW_CHUNK + 5)]
    rows[ROW_CHUNK + 2] = rows[ROW_CHUNK + 2].replace("79.85", "1e999")
    body = ('{"rows": [' + ",".join(rows) + "]}").encode()
    split = split_body(body)
    assert split.rows is not None
    chunks = list(split.rows.chunks())
    assert [len(c.rows) for c in chunks] == [ROW_CHUNK, 5]
    assert not chunks[0].problems
    (problem,) = chunks[1].problems
    assert (problem.path, problem.rowIndex) == (f"rows[{ROW_CHUNK + 2}].monthly_charges", 8194)
    assert chunks[1].rows[2] is None and chunks[1].rows[3] == demo_rows(ROW_CHUNK + 5)[-2]


def test_a_body_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(RowValidationFailed) as caught:
        split_body(b"[1, 2, 3]")
    assert caught.value.errors[0]["path"] == "body"


# --- valid rows to Arrow, column-wise ----------------------------------------------------------


def snapshot(spec: dict[str, Any]) -> ModelSnapshot:
    return ModelSnapshot(id=4242, spec_version=1, data_spec=spec)


def test_integers_beyond_64_bits_are_refused_at_their_path() -> None:
    spec = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "x": {"type": "number"}},
    }
    rows = [{"n": 1, "x": 1}, {"n": 2**64 - 1, "x": 2}, {"n": 3, "x": 3}]
    with pytest.raises(RowValidationFailed) as caught:
        check_rows(snapshot(spec), ListRows(rows))
    assert [(e["path"], e["rowIndex"]) for e in caught.value.errors] == [("rows[1].n", 1)]
    assert "64-bit integer" in caught.value.errors[0]["message"]
    # Beyond 64 bits is fine in a number column: it is stored as the float it is.
    table = check_rows(snapshot(spec), ListRows([{"n": 1, "x": 2**64}, {"n": 2, "x": 2.0}]))
    assert table.column("x").to_pylist() == [float(2**64), 2.0]


def test_values_not_pinned_to_one_type_keep_their_type() -> None:
    # Issue 33 case 2: a column the data-spec does not pin is typed by the values sent; only a
    # column whose values no one Arrow type holds is JSON text, strings included ('"a"' and
    # '7' stay apart), and marked so the pipeline reads the values back.
    spec = {
        "type": "object",
        "properties": {
            "tag": {"type": ["string", "integer"]},
            "meta": {"type": "object"},
            "flag": {"enum": [True, False]},
            "count": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "ratio": {"$ref": "#/$defs/n"},
        },
        "$defs": {"n": {"type": "number"}},
    }
    rows = [
        {"tag": "a", "meta": {"k": [1, 2]}, "flag": True, "count": 5, "ratio": 1},
        {"tag": 7, "flag": False, "count": None, "ratio": 0.5},
    ]
    table = rows_to_table(rows, spec)
    assert table.to_pylist() == [
        {"tag": '"a"', "meta": '{"k":[1,2]}', "flag": True, "count": 5, "ratio": 1.0},
        {"tag": "7", "meta": None, "flag": False, "count": None, "ratio": 0.5},
    ]
    assert table.schema.field("count").type == pa.int64()
    assert json_columns(table.schema) == {"tag", "meta"}


def test_members_the_data_spec_does_not_declare_are_stored() -> None:
    # Issue 33 case 3: nothing accepted is lost; undeclared members become columns, typed
    # by their values, after the declared ones in the order they first appear.
    spec = {"type": "object", "allOf": [{"properties": {"foo": {"type": "string"}}}]}
    builder = RowTableBuilder(spec)
    assert builder.add([{"foo": "baz", "bar": 2}], 0) == []
    assert builder.add([{"foo": "qux", "baz": [1]}, {"bar": 3}], 1) == []
    table = builder.table()
    assert table.to_pylist() == [
        {"foo": "baz", "bar": 2, "baz": None},
        {"foo": "qux", "bar": None, "baz": "[1]"},
        {"foo": None, "bar": 3, "baz": None},
    ]
    assert table.schema.field("bar").type == pa.int64()


def test_undeclared_member_names_a_column_cannot_have_are_refused() -> None:
    spec = {"type": "object", "properties": {"a": {"type": "integer"}}}
    with pytest.raises(RowValidationFailed) as caught:
        rows_to_table([{"a": 1}, {"a": 2, "b\x00": 1}], spec)
    assert [(e["path"], e["rowIndex"]) for e in caught.value.errors] == [("rows[1]", 1)]
    assert "control characters" in caught.value.errors[0]["message"]
    many = [{f"m{i}": i for i in range(MAX_UNDECLARED_MEMBERS + 1)}]
    with pytest.raises(RowValidationFailed) as caught:
        rows_to_table(many, spec)
    assert f"at most {MAX_UNDECLARED_MEMBERS}" in caught.value.errors[0]["message"]


def test_batches_are_appended_in_order() -> None:
    builder = RowTableBuilder(demo_definition().data_spec)
    rows = demo_rows(10)
    assert builder.add(rows[:4], 0) == [] and builder.add(rows[4:], 4) == []
    table = builder.table()
    assert table.column("tenure_months").to_pylist() == list(range(10))
    assert table.schema.names == list(demo_definition().data_spec["properties"])
