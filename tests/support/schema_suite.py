"""The official JSON-Schema-Test-Suite (vendored under tests/vendor/) as data-specs and rows,
and the three places that judge a row: the API, the pipeline's Arrow check, the web form's Ajv.

Each suite case becomes up to two data-specs: its schema as the property `v` of an object
(row `{"v": data}`), and, when the schema describes objects, the schema itself as the
data-spec (row `data`, for the tests whose data is an object). A null member is an absent
one in all three places (docs/validation.md), so a property-level test whose data is null
expects the row to be valid, and root-level tests whose data has a null member are left out.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.checks.batch import count_spec_violations
from pipeline.checks.compliance import violations
from pipeline.core.errors import InvalidInput, RowValidationFailed
from pipeline.intake.contributions import ModelSnapshot, check_rows
from pipeline.intake.jsonrows import ListRows, parse_value, split_body
from pipeline.intake.parquet_rows import table_to_parquet_bytes
from pipeline.models.dataspec import check_schema, present
from pipeline.store.json_columns import FreeColumn, decode_json_cell, json_columns
from pipeline.store.reading import read_dataset

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "tests" / "vendor" / "json_schema_test_suite"
AJV_SCRIPT = ROOT / "tests" / "support" / "ajv_verdicts.js"
NODE = "/usr/bin/node"


@dataclass
class SpecCase:
    """One data-spec made from a suite case, with its rows and what the suite expects."""

    key: str  # "<file>|<case description>|<mode>"
    spec: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)  # the suite's test descriptions
    expected: list[bool] = field(default_factory=list)


def suite_files(draft: str, names: list[str]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    for name in names:
        path = SUITE / draft / f"{name}.json"
        yield name, json.loads(path.read_text(encoding="utf-8"))


def as_property(schema: Any) -> Any:
    """A suite schema where a data-spec property stands: its own resource, so `#` is itself."""
    if isinstance(schema, dict) and "$id" not in schema:
        return {"$id": "urn:suite:property", **schema}
    return schema


def as_data_spec(schema: dict[str, Any]) -> dict[str, Any]:
    """A suite schema for objects as a data-spec (which must say `"type": "object"`).

    A data-spec without properties gets one the suite's rows never hold (`_`, any value):
    that changes no verdict, and gives the stored file a column when a row is `{}` (a file
    without columns keeps no rows, so such a contribution is refused; tested on its own).
    """
    text = json.dumps(schema)
    if "$ref" in text or "$dynamicRef" in text:
        # Said at the root, "type": "object" would also bind what refers to the root.
        spec: dict[str, Any] = {"type": "object", "allOf": [as_property(schema)]}
    else:
        spec = {**schema, "type": "object"}
    if not spec.get("properties"):
        spec["properties"] = {"_": {}}
    return spec


def as_received(value: Any) -> Any:
    """A value as the API reads it from a body (orjson: beyond 64 bits an integer is a float)."""
    parsed, problems = parse_value(json.dumps(value).encode(), "rows[0]", 0)
    assert not problems, problems
    return parsed


def spec_cases(draft: str, names: list[str]) -> list[SpecCase]:
    found: list[SpecCase] = []
    for name, groups in suite_files(draft, names):
        for group in groups:
            schema = group["schema"]
            prop = SpecCase(
                f"{name}|{group['description']}|property",
                {"type": "object", "properties": {"v": as_property(schema)}},
            )
            root = None
            if isinstance(schema, dict) and schema.get("type", "object") == "object":
                root = SpecCase(f"{name}|{group['description']}|root", as_data_spec(schema))
            for test in group["tests"]:
                data = as_received(test["data"])
                prop.rows.append({"v": data})
                prop.tests.append(test["description"])
                prop.expected.append(True if data is None else bool(test["valid"]))
                if root is not None and isinstance(data, dict) and None not in data.values():
                    root.rows.append(data)
                    root.tests.append(test["description"])
                    root.expected.append(bool(test["valid"]))
            found.append(prop)
            if root is not None and root.rows:
                found.append(root)
    return found


# The judges. Each returns one verdict per row (True: valid), or a string when the data-spec
# itself is refused.


def api_verdicts(case: SpecCase, model_id: int) -> list[bool] | str:
    """The contributions endpoint's domain call, one row per contribution."""
    try:
        check_schema(case.spec)
    except InvalidInput as exc:
        return f"refused at registration: {exc}"
    model = ModelSnapshot(model_id, 1, case.spec)
    verdicts = []
    for row in case.rows:
        body = split_body(orjson.dumps({"rows": [row]}))
        assert body.rows is not None
        try:
            check_rows(model, body.rows)
        except RowValidationFailed:
            verdicts.append(False)
        else:
            verdicts.append(True)
    return verdicts


def stored_problems(case: SpecCase, model_id: int, accepted: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the stored file of the accepted rows: rows the pipeline's check
    counts as violations, or values not stored as sent."""
    if not accepted:
        return []
    table = check_rows(ModelSnapshot(model_id, 1, case.spec), ListRows(accepted))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.parquet"
        path.write_bytes(table_to_parquet_bytes(table))
        frame = read_dataset(path, "parquet")
        stored = pq.read_table(path)
    problems = []
    count = count_spec_violations(frame, case.spec, 1000)
    if count:
        problems.append(f"{count} accepted rows counted as violations by the pipeline")
    encoded = json_columns(stored.schema)
    for row, cells in zip(accepted, stored.to_pylist(), strict=True):
        back = {
            name: decode_json_cell(value) if name in encoded else value
            for name, value in cells.items()
            if value is not None
        }
        if not same_json(back, present(row)):
            problems.append(f"stored {back!r} for {row!r}")
    return problems


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: 1 == 1.0, but true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same_json, a, b))
    return type(a) is type(b) and a == b


def arrow_verdicts(case: SpecCase) -> list[bool]:
    """The pipeline's Arrow check on the rows as a supplier's table typed by its values."""
    names = dict.fromkeys(name for row in case.rows for name in row)
    columns = [FreeColumn(name) for name in names]
    for column in columns:
        column.add([row.get(column.name) for row in case.rows])
    fields, arrays = zip(*(c.finish() for c in columns), strict=True) if columns else ((), ())
    table = pa.Table.from_arrays(list(arrays), schema=pa.schema(list(fields)))
    if not columns:
        table = pa.table({"": pa.nulls(len(case.rows))}).drop_columns([""])
    bad = violations(table, case.spec, 1000)
    return [not flag for flag in np.asarray(bad, dtype=bool)]


def ajv_verdicts(cases: list[SpecCase]) -> list[list[bool] | str]:
    """The web form's verdicts (api/static/rowcheck.js on the vendored Ajv), one Node run."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as handle:
        json.dump([{"spec": c.spec, "rows": c.rows} for c in cases], handle)
        handle.flush()
        done = subprocess.run(
            [NODE, str(AJV_SCRIPT), handle.name], capture_output=True, check=True, timeout=120
        )
    answers = json.loads(done.stdout)
    return [a if isinstance(a, list) else f"not compiled: {a['error']}" for a in answers]
