"""Per-model contract (spec §4.1) and the model registry (issue 2 §4)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from pipeline.core.errors import InvalidInput
from pipeline.models.definitions import demo_definition, parse_definition


def test_demo_model_is_realistic_and_its_example_validates() -> None:
    demo = demo_definition()
    spec = demo.data_spec
    Draft202012Validator.check_schema(spec)
    assert spec["$schema"].endswith("2020-12/schema")
    assert spec["required"]
    props = spec["properties"]
    assert any(
        p["type"] in {"integer", "number"} and "minimum" in p and "maximum" in p
        for p in props.values()
    )
    assert any("enum" in p for p in props.values())
    assert demo.target_column in props
    assert list(Draft202012Validator(spec).iter_errors(demo.example_row)) == []


def test_definition_with_failing_example_is_refused() -> None:
    data = demo_definition().model_dump()
    data["example_row"]["tenure_months"] = -5
    with pytest.raises(InvalidInput, match="example_row"):
        parse_definition(data)


def test_definition_target_must_be_a_property() -> None:
    data = demo_definition().model_dump()
    data["target_column"] = "nope"
    with pytest.raises(InvalidInput, match="target_column"):
        parse_definition(data)


def test_data_spec_is_schema_json(client) -> None:
    response = client.get("/api/models/1/data-spec")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/schema+json")
    assert "content-disposition" not in response.headers
    assert json.loads(response.text) == demo_definition().data_spec


def test_data_spec_download_is_an_attachment(client) -> None:
    response = client.get("/api/models/1/data-spec", params={"download": "true"})
    assert response.status_code == 200
    assert response.headers["content-disposition"].startswith("attachment;")


def test_example_json_and_csv(client) -> None:
    example = client.get("/api/models/1/data-spec/example")
    assert example.status_code == 200
    assert example.headers["content-type"].startswith("application/json")
    row = example.json()
    assert row == demo_definition().example_row

    as_csv = client.get("/api/models/1/data-spec/example", params={"format": "csv"})
    assert as_csv.status_code == 200
    assert as_csv.headers["content-type"].startswith("text/csv")
    lines = list(csv.reader(io.StringIO(as_csv.text)))
    assert len(lines) == 2
    header, values = lines
    assert header == list(demo_definition().data_spec["properties"])
    assert dict(zip(header, values, strict=True))["contract"] == row["contract"]

    download = client.get(
        "/api/models/1/data-spec/example", params={"format": "csv", "download": "true"}
    )
    assert download.headers["content-disposition"].startswith("attachment;")


@pytest.mark.parametrize(
    "path",
    ["/api/models/999/data-spec", "/api/models/999/data-spec/example"],
)
def test_unknown_model_is_404_with_detail(client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert "detail" in response.json()


def test_bad_parameters_are_400_not_422(client) -> None:
    assert client.get("/api/models/abc/data-spec").status_code == 400
    response = client.get("/api/models/1/data-spec/example", params={"format": "xml"})
    assert response.status_code == 400
    assert "format" in response.json()["detail"]


def test_models_index_lists_the_demo(client) -> None:
    models = client.get("/api/models").json()
    assert models[0]["id"] == 1
    assert models[0]["name"] == "customer-churn"


def test_cli_models_add_prints_id_last(tmp_path: Path, settings, monkeypatch, capsys) -> None:
    from cli.main import main
    from pipeline.core.config import get_settings

    monkeypatch.setenv("MARKETPLACE_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("DATABASE_URL", settings.resolved_database_url)
    get_settings.cache_clear()
    definition = demo_definition().model_dump()
    definition["name"] = "house-prices"
    definition["task_type"] = "regression"
    definition["estimator"] = "linear_regression"
    definition["target_column"] = "monthly_charges"
    path = tmp_path / "model.yaml"
    import yaml

    path.write_text(yaml.safe_dump(definition))
    try:
        assert main(["models", "add", str(path)]) == 0
        out = capsys.readouterr().out.strip().splitlines()
        assert out[-1] == "2"
        assert main(["models", "list"]) == 0
        listing = capsys.readouterr().out
        assert "customer-churn" in listing and "house-prices" in listing
    finally:
        get_settings.cache_clear()


def test_cli_token_prints_a_usable_token(settings, monkeypatch, capsys, client) -> None:
    from cli.main import main
    from pipeline.core.config import get_settings

    monkeypatch.setenv("MARKETPLACE_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("JWT_SECRET", settings.jwt_key())
    get_settings.cache_clear()
    try:
        assert main(["token", "--user", "bob"]) == 0
    finally:
        get_settings.cache_clear()
    token = capsys.readouterr().out.strip().splitlines()[-1]
    response = client.get(
        "/api/models/1/contributions/00000000-0000-0000-0000-000000000000",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 404  # authenticated, the job just does not exist


def _hostile_definition() -> dict[str, object]:
    """An operator's model file whose example row holds spreadsheet formulas (issue 21 row 9)."""
    definition = demo_definition().model_dump()
    definition["name"] = "formula-model"
    properties = definition["data_spec"]["properties"]
    for name in ("=note", "remark", "+sign", "@at", "tabbed", "meta"):
        properties[name] = {"type": ["string", "object", "null"]}
    definition["example_row"].update(
        {
            "=note": "=cmd|' /C calc'!A0",
            "remark": "-2+3",
            "+sign": "+1",
            "@at": "@SUM(A1)",
            "tabbed": "\t=1+1",
            "meta": {"a": 1},
        }
    )
    definition["example_row"]["monthly_charges"] = -0.0  # a number stays a number
    return definition


def test_example_csv_escapes_cells_a_spreadsheet_would_run(client, db) -> None:
    from pipeline.models.definitions import parse_definition
    from pipeline.models.registry import register_model

    with db.session() as session:
        model_id = register_model(session, parse_definition(_hostile_definition())).id
    response = client.get(f"/api/models/{model_id}/data-spec/example", params={"format": "csv"})
    assert response.status_code == 200
    header, values = list(csv.reader(io.StringIO(response.text)))
    cells = dict(zip(header, values, strict=True))
    assert {"'=note", "'+sign", "'@at"} <= set(header)
    assert cells["'=note"] == "'=cmd|' /C calc'!A0"
    assert cells["remark"] == "'-2+3"
    assert cells["'+sign"] == "'+1"
    assert cells["'@at"] == "'@SUM(A1)"
    assert cells["tabbed"] == "'\t=1+1"
    assert cells["meta"] == '{"a": 1}'
    assert cells["monthly_charges"] == "-0.0"
    assert cells["contract"] == "month-to-month"
    # The JSON example is data, not a spreadsheet: unchanged.
    example = client.get(f"/api/models/{model_id}/data-spec/example").json()
    assert example["=note"] == "=cmd|' /C calc'!A0"


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@x", "'@x"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("plain", "plain"),
        (-1.5, "-1.5"),
        (-3, "-3"),
        (True, "true"),
        (None, ""),
        (["=x"], '["=x"]'),
    ],
)
def test_csv_cells_neutralise_formula_starts(value: object, cell: str) -> None:
    from pipeline.core.csv_cells import csv_cell

    assert csv_cell(value) == cell
