"""Path ids are bounded before they are parsed (issue 21 row 7): a bad id is a 404 page or a 400
body, never a 500 with a traceback in the log."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

HUGE = "9" * 4_400  # past int()'s 4,300-digit limit
SUPERSCRIPT_TWO = "%C2%B2"  # "²": str.isdigit() says yes, int() says no


@pytest.mark.parametrize("model_id", [SUPERSCRIPT_TWO, HUGE, "00000000001", "-1", "１"])
def test_the_contribution_page_of_a_malformed_model_id_is_a_404_page(
    client: TestClient, caplog: pytest.LogCaptureFixture, model_id: str
) -> None:
    caplog.set_level(logging.INFO)
    response = client.get(f"/models/{model_id}/contribute")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert "There is no such model" in response.text
    assert HUGE not in response.text  # nothing of the id is echoed back
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    "path",
    [
        "/api/models/{id}/data-spec",
        "/api/models/{id}/data-spec/example",
        "/api/models/{id}/evaluations",
        "/api/models/{id}/contributions/00000000-0000-0000-0000-000000000000",
    ],
)
@pytest.mark.parametrize("model_id", [SUPERSCRIPT_TWO, HUGE])
def test_api_routes_answer_400_for_a_malformed_model_id(
    client: TestClient,
    auth_headers: Callable[..., dict[str, str]],
    caplog: pytest.LogCaptureFixture,
    path: str,
    model_id: str,
) -> None:
    caplog.set_level(logging.INFO)
    response = client.get(path.format(id=model_id), headers=auth_headers())
    assert response.status_code == 400
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("model_id", [SUPERSCRIPT_TWO, HUGE])
def test_owner_routes_answer_400_for_a_malformed_model_id(
    client: TestClient, platform_key: Callable[..., str], model_id: str
) -> None:
    headers = {"Authorization": f"Bearer {platform_key('admin')}"}
    schedule = client.get(f"/api/v1/models/{model_id}/evaluation-schedule", headers=headers)
    assert schedule.status_code == 400
    upload = client.post(f"/api/v1/benchmarks/upload/{model_id}", headers=headers)
    assert upload.status_code == 400
