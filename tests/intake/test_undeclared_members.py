"""Members a data-spec does not declare are stored (issue 33 case 3), within bounds a supplier
cannot blow up: a column each, so few names spread one a row must not become billions of
cells of nulls (issue 33 review)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipeline.core.db import Database
from pipeline.core.errors import RowValidationFailed
from pipeline.intake.parquet_rows import MAX_UNDECLARED_CELLS, RowTableBuilder, rows_to_table
from pipeline.models.definitions import ModelDefinition
from pipeline.models.registry import register_model
from tests.intake.test_contributions import counts, stored_files

OPEN = ModelDefinition(
    name="open-rows",
    description="Rows whose data-spec allows members it does not declare.",
    task_type="regression",
    target_column="y",
    estimator="linear_regression",
    data_spec={
        "type": "object",
        "required": ["x", "y"],
        "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
    },
    example_row={"x": 1.0, "y": 2.0},
)


def open_model(db: Database) -> int:
    with db.session() as session:
        return register_model(session, OPEN).id


def test_a_member_absent_from_a_whole_batch_is_null_there() -> None:
    builder = RowTableBuilder({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert builder.add([{"a": 1, "x": 1.5}], 0) == []
    assert builder.add([{"a": 2}, {"a": 3}], 1) == []
    assert builder.add([{"a": 4, "x": 2}], 3) == []
    table = builder.table()
    assert table.column("x").to_pylist() == [1.5, None, None, 2.0]
    assert table.schema.field("x").type == pa.float64()


def test_undeclared_cells_past_the_bound_are_refused() -> None:
    spec = {"type": "object", "properties": {"a": {"type": "integer"}}}
    columns = 1000
    rows = [{"a": i, f"m{i % columns}": i} for i in range(MAX_UNDECLARED_CELLS // columns + 1)]
    with pytest.raises(RowValidationFailed) as caught:
        rows_to_table(rows, spec)
    (error,) = caught.value.errors
    assert f"at most {MAX_UNDECLARED_CELLS:,} are taken" in error["message"]
    assert error["path"] == f"rows[{error['rowIndex']}]"
    # As many rows below the bound are stored, every member in its own column.
    table = rows_to_table(rows[: MAX_UNDECLARED_CELLS // columns], spec)
    assert table.num_columns == columns + 1
    assert table.column("m7").to_pylist()[:8] == [None] * 7 + [7]


def test_the_endpoint_refuses_sparse_undeclared_members_and_stores_nothing(
    client, auth_headers, db, settings
) -> None:
    model = open_model(db)
    count = MAX_UNDECLARED_CELLS // 1000 + 1
    rows = [{"x": i, "y": 1, f"note_{i % 1000}": "x"} for i in range(count)]
    payload = {"modelId": model, "benchmarkSpecId": None, "rows": rows}
    url = f"/api/models/{model}/contributions"
    response = client.post(url, json=payload, headers=auth_headers())
    assert response.status_code == 400, response.text
    (error,) = response.json()["errors"]
    assert "members the data-spec does not declare" in error["message"]
    assert counts(db) == (0, 0, 0)
    assert stored_files(settings) == []
