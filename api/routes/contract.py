"""Per-model contract (spec §4.1): the data-spec and its worked example row; public."""

from __future__ import annotations

import io
import json
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from api.deps import ModelId, get_db
from pipeline.core.csv_cells import write_csv
from pipeline.core.db import Database
from pipeline.models.registry import get_model, list_models

router = APIRouter(prefix="/api/models", tags=["contract"])

SCHEMA_MEDIA_TYPE = "application/schema+json"


def _attachment(filename: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{filename}"'}


@router.get("", summary="List models")
def models_index(db: Database = Depends(get_db)) -> list[dict[str, Any]]:
    with db.session() as session:
        return [
            {
                "id": m.id,
                "name": m.name,
                "description": m.description,
                "task_type": m.task_type,
                "target_column": m.target_column,
                # The owner's training code by content hash (docs/sandbox.md); null for a
                # model with a listed estimator.
                "trainer": (
                    {"entry": m.trainer, "folder_sha256": m.trainer_sha256}
                    if m.trainer is not None
                    else None
                ),
                # The environment its folder's requirements.txt installed (docs/sandbox.md);
                # null without one.
                "environment": (
                    {
                        "sha256": m.trainer_env,
                        "size_bytes": m.trainer_env_bytes,
                        "packages": m.trainer_env_packages or [],
                    }
                    if m.trainer_env is not None
                    else None
                ),
                "min_improvement_pct": m.min_improvement_pct,
                # Fits of each training frame in a valuation, the pool their mean
                # (docs/models.md).
                "paired_fits": m.paired_fits,
            }
            for m in list_models(session)
        ]


@router.get(
    "/{modelId}/data-spec",
    summary="Model data-spec (JSON Schema)",
    response_class=Response,
    responses={200: {"content": {SCHEMA_MEDIA_TYPE: {}}}, 404: {"description": "unknown model"}},
)
def data_spec(
    modelId: ModelId,  # noqa: N803 - the spec's path parameter name
    download: bool = Query(False, description="true downloads the file"),
    db: Database = Depends(get_db),
) -> Response:
    with db.session() as session:
        model = get_model(session, modelId)
        body = json.dumps(model.data_spec, indent=2)
    headers = _attachment(f"model-{modelId}-data-spec.schema.json") if download else None
    return Response(body, media_type=SCHEMA_MEDIA_TYPE, headers=headers)


@router.get(
    "/{modelId}/data-spec/example",
    summary="One worked example row, as JSON or CSV",
    response_class=Response,
    responses={
        200: {"content": {"application/json": {}, "text/csv": {}}},
        404: {"description": "unknown model"},
    },
)
def data_spec_example(
    modelId: ModelId,  # noqa: N803
    format: Literal["json", "csv"] = Query("json", description="csv for CSV; default JSON"),
    download: bool = Query(False),
    db: Database = Depends(get_db),
) -> Response:
    with db.session() as session:
        model = get_model(session, modelId)
        row = dict(model.example_row)
        columns = list(model.data_spec.get("properties", {})) or list(row)
    if format == "csv":
        out = io.StringIO()
        write_csv(out, columns, [row], lineterminator="\n")
        headers = _attachment(f"model-{modelId}-example.csv") if download else None
        return Response(out.getvalue(), media_type="text/csv", headers=headers)
    headers = _attachment(f"model-{modelId}-example.json") if download else None
    return Response(json.dumps(row, indent=2), media_type="application/json", headers=headers)
