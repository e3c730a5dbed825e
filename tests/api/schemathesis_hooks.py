"""Schemathesis hooks: rules across fields that JSON Schema cannot state, kept in valid cases.

Only positive cases (those meant to be valid) are touched, so negative cases still test that
the server refuses what the document forbids. Loaded by tests/api/schemathesis.toml.
"""

from __future__ import annotations

from typing import Any

import schemathesis

CONTRIBUTIONS = "/api/models/{modelId}/contributions"
MANIFEST_HOLDERS = {("PUT", "/api/contributors/me"), ("POST", CONTRIBUTIONS)}


def _positive(case: schemathesis.Case) -> bool:
    meta = case.meta
    return meta is not None and meta.generation.mode.is_positive


def _coherent_manifest(manifest: Any) -> None:
    """Contributors' weights sum to 1 and their ids are distinct (spec §2.5)."""
    if not isinstance(manifest, dict):
        return
    shares = manifest.get("contributors")
    if not isinstance(shares, list) or not shares:
        return
    if not all(isinstance(share, dict) for share in shares):
        return
    for index, share in enumerate(shares):
        share["id"] = f"contributor-{index}"
        share["weight"] = 1 / len(shares)


@schemathesis.hook
def map_case(context: schemathesis.HookContext, case: schemathesis.Case) -> schemathesis.Case:
    operation = context.operation
    if operation is None or not _positive(case) or not isinstance(case.body, dict):
        return case
    key = (operation.method.upper(), operation.path)
    if key == ("POST", CONTRIBUTIONS):
        # The body's modelId repeats the path's (spec §2.2).
        model_id = (case.path_parameters or {}).get("modelId")
        if isinstance(model_id, int):
            case.body["modelId"] = model_id
        _coherent_manifest(case.body.get("manifest"))
    elif key in MANIFEST_HOLDERS:
        _coherent_manifest(case.body)
    return case
