"""Property-based conformance testing of every documented operation with schemathesis.

Every check schemathesis has runs (`[checks] enabled = true` in tests/api/schemathesis.toml, the
same as `--checks all` on the command line): no 5xx, every answered status and header
documented, bodies matching their schemas, schema-valid requests accepted and schema-invalid
ones refused, 405 with the right `Allow`, credentials not ignored. The stateful test follows
the document's links (create a key, then read, rotate and revoke it; ...). Credentials come
per operation from the security scheme it declares. Requests go to the ASGI app in-process;
the seed is fixed (derandomize) and the example counts bounded to keep the file short.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from pydantic import SecretStr

from api.app import create_app
from pipeline.auth.keys import KeyCreate, create_key
from pipeline.auth.sessions import issue_token
from pipeline.bootstrap import prepare_store
from pipeline.core.config import Settings
from pipeline.core.db import Database

CONFIG = Path(__file__).with_name("schemathesis.toml")
ADMIN_TOKEN = "fuzz-admin-token"

_data_dir = Path(tempfile.mkdtemp(prefix="mk-fuzz-"))
_settings = Settings(
    marketplace_data_dir=_data_dir,
    jwt_secret=SecretStr("fuzz-secret-fuzz-secret-fuzz-secret-123"),
    admin_token=SecretStr(ADMIN_TOKEN),
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

# tests/api/schemathesis.toml reads the three credentials from the environment.
os.environ["MARKETPLACE_FUZZ_ADMIN_TOKEN"] = ADMIN_TOKEN
os.environ["MARKETPLACE_FUZZ_SESSION_TOKEN"] = issue_token(_settings, "fuzzer", admin=True)
os.environ["MARKETPLACE_FUZZ_API_KEY"] = _platform_key

app = create_app(_settings)
schema = schemathesis.openapi.from_asgi(
    "/openapi.json", app, config=schemathesis.Config.from_path(CONFIG)
)

BOUNDED = settings(
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    database=None,
)


@schema.parametrize()
@settings(BOUNDED, max_examples=8)
def test_every_operation_conforms(case: schemathesis.Case) -> None:
    case.call_and_validate()


def test_stateful_sequences_conform() -> None:
    state_machine = schema.as_state_machine()
    state_machine.run(settings=settings(BOUNDED, max_examples=15, stateful_step_count=6))
