"""Property-based fuzzing of every documented operation: no input may produce a 5xx.

Schemathesis generates requests from `/openapi.json` and calls the ASGI app in-process, with
valid credentials for each operation group so the fuzzing reaches past authentication.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings

from api.app import create_app
from pipeline.auth.keys import KeyCreate, create_key
from pipeline.auth.sessions import issue_token
from pipeline.bootstrap import prepare_store
from pipeline.core.config import Settings
from pipeline.core.db import Database

_data_dir = Path(tempfile.mkdtemp(prefix="mk-fuzz-"))
_settings = Settings(
    marketplace_data_dir=_data_dir,
    jwt_secret="fuzz-secret-fuzz-secret-fuzz-secret-123",
    admin_token="fuzz-admin-token",
    upload_max_bytes=2_000_000,
)
prepare_store(_settings)
_db = Database.from_settings(_settings)
with _db.session() as _session:
    _platform_key = create_key(
        _session,
        KeyCreate(name="fuzz", service_id="platform", rate_limit_per_hour=100_000),
        # The admin user owns the demo model, so fuzzing reaches past the owner check.
        user_id=_settings.admin_user_id,
    ).api_key
_db.dispose()
_session_token = issue_token(_settings, "fuzzer", admin=True)

app = create_app(_settings)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


def credentials_for(path: str) -> dict[str, Any]:
    if path.startswith("/api/v1/keys"):
        token = "fuzz-admin-token"
    elif path.startswith("/api/v1/organizations") or not path.startswith("/api/v1/"):
        token = _session_token
    else:
        token = _platform_key
    return {"Authorization": f"Bearer {token}"}


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_operation_answers_5xx(case: schemathesis.Case) -> None:
    headers = {**credentials_for(case.path), **(case.headers or {})}
    response = case.call(headers=headers)
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"
    )
