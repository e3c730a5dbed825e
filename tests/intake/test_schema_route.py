"""Issue 33 cases 2, 3, 5, 6 and 7 as a supplier and an owner reach them: the data-spec registered
as a model's, rows sent to `POST /api/models/{id}/contributions`, the stored file read back by
the pipeline's reader and judged by its check (test_schema_conformance.py tests the parts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from pipeline.checks.batch import count_spec_violations
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput
from pipeline.core.tables import DatasetVersion
from pipeline.models.definitions import load_definition
from pipeline.models.registry import register_model
from pipeline.store.json_columns import decode_json_cell
from pipeline.store.reading import read_dataset
from tests.intake.test_contributions import counts

SPEC: dict[str, Any] = {
    "type": "object",
    "required": ["x", "y"],
    "properties": {
        "x": {"type": "number"},
        "y": {"type": "number"},
        "n": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "g0": {"$id": "urn:example:g0", "$ref": "https://json-schema.org/draft/2020-12/schema"},
        "s": {"type": "string", "pattern": r"^\p{Letter}+$"},
    },
}


def definition_file(folder: Path, spec: dict[str, Any], name: str = "open-spec") -> Path:
    """A model definition file, as an owner gives `marketplace models add`."""
    path = folder / f"{name}.json"
    definition = {
        "name": name,
        "description": "A data-spec from issue 33.",
        "task_type": "regression",
        "target_column": "y",
        "estimator": "linear_regression",
        "data_spec": spec,
        "example_row": {"x": 1.0, "y": 2.0},
    }
    path.write_text(json.dumps(definition))
    return path


def model(db: Database, folder: Path, spec: dict[str, Any]) -> int:
    definition = load_definition(definition_file(folder, spec))
    with db.session() as session:
        return register_model(session, definition).id


def post(client: Any, headers: dict[str, str], model_id: int, rows: list[Any]) -> Any:
    payload = {"modelId": model_id, "benchmarkSpecId": None, "rows": rows}
    return client.post(f"/api/models/{model_id}/contributions", json=payload, headers=headers)


def test_rows_sent_are_stored_with_their_types_and_pass_the_pipeline(
    client, auth_headers, db, settings, tmp_path
) -> None:
    model_id = model(db, tmp_path, SPEC)
    rows = [
        {"x": 1, "y": 2.5, "n": 5, "s": "héllo", "bar": 2},
        {"x": 2, "y": 3.5, "n": 7, "g0": {"type": "string"}, "foo": "baz"},
    ]
    response = post(client, auth_headers(), model_id, rows)
    assert response.status_code == 202, response.text

    with db.session() as session:
        key = session.scalars(select(DatasetVersion.object_key)).one()
    frame = read_dataset(settings.objects_dir / key, "parquet")
    assert count_spec_violations(frame, SPEC, 100) == 0
    decoded = set(frame.attrs.get("json_columns", ()))
    back = [
        {k: decode_json_cell(v) if k in decoded else v for k, v in row.items() if v == v}
        for row in frame.to_dict("records")
    ]
    back = [{k: v for k, v in row.items() if v is not None} for row in back]
    assert back == rows  # 5 stays 5 (case 2); `bar` and `foo` are kept (case 3)
    assert type(back[0]["n"]) is int


def test_a_row_against_the_meta_schema_is_a_400_with_row_errors(
    client, auth_headers, db, tmp_path
) -> None:
    model_id = model(db, tmp_path, SPEC)
    bad = {"x": 1, "y": 2, "g0": {"$defs": {"foo": {"type": 1}}}}
    response = post(client, auth_headers(), model_id, [bad, {"x": 1, "y": 2, "s": "h1"}])
    assert response.status_code == 400, response.text  # case 5: was a 500
    errors = response.json()["errors"]
    assert {e["rowIndex"] for e in errors} == {0, 1}
    assert {e["path"].split(".")[0] for e in errors} == {"rows[0]", "rows[1]"}
    assert counts(db) == (0, 0, 0)


def test_a_draft_07_data_spec_is_refused_at_registration(tmp_path: Path) -> None:
    spec = {**SPEC, "$schema": "http://json-schema.org/draft-07/schema#"}
    with pytest.raises(InvalidInput, match="only JSON Schema draft 2020-12"):
        load_definition(definition_file(tmp_path, spec, "draft-07"))
