"""Writes a browser sends with the session cookie (issue 21 row 4): only `application/json`
(415 otherwise), never from a page of another origin (403); the session cookie is set by the
server, `HttpOnly`, `SameSite=Strict`, `Secure` over HTTPS.

Before: `POST /api/models/1/contributions` with `Content-Type: text/plain`, the cookie and a
foreign `Origin` answered 202 (a plain no-JS form on another port of the same host created jobs
as the victim). The browser version of that attack is in test_web_form.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import Contribution, ContributorProfile
from tests.intake.test_contributions import URL, body

OWN_ORIGIN = "http://testserver"
FOREIGN = [
    {"Origin": "http://127.0.0.1:9999"},
    {"Origin": "http://testserver.evil.example"},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "same-site"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Origin": OWN_ORIGIN, "Sec-Fetch-Site": "cross-site"},
]
NOT_JSON = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    None,
]
MANIFEST = {
    "contributor_id": "alice",
    "wallet_address": "0x8c2Ead04647BE200896CE2020DCbEbA56B6afB75",
    "data_description": "rows",
    "data_source": "CRM export",
    "license": "CC-BY-4.0",
}


@pytest.fixture
def cookie_client(
    app: Any, settings: Settings, session_token: Callable[..., str]
) -> Iterator[TestClient]:
    """A client that authenticates with the session cookie only, as a browser does."""
    with TestClient(app) as client:
        client.cookies.set(settings.session_cookie_name(), session_token("alice"))
        yield client


def _jobs(db: Database) -> int:
    with db.session() as session:
        return session.scalar(select(func.count()).select_from(Contribution)) or 0


def _send(client: TestClient, method: str, url: str, payload: Any, headers: dict[str, str]) -> Any:
    return client.request(method, url, content=json.dumps(payload).encode(), headers=headers)


@pytest.mark.parametrize("content_type", NOT_JSON)
def test_a_contribution_with_the_cookie_must_be_json(
    cookie_client: TestClient, db: Database, content_type: str | None
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    response = _send(cookie_client, "POST", URL, body(2), {**headers, "Origin": OWN_ORIGIN})
    assert response.status_code == 415
    assert response.json() == {"detail": "the request body must be application/json"}
    assert _jobs(db) == 0


@pytest.mark.parametrize("foreign", FOREIGN)
def test_a_contribution_from_another_origin_is_refused(
    cookie_client: TestClient, db: Database, foreign: dict[str, str]
) -> None:
    headers = {"Content-Type": "application/json", **foreign}
    response = _send(cookie_client, "POST", URL, body(2), headers)
    assert response.status_code == 403
    assert "another origin" in response.json()["detail"]
    assert _jobs(db) == 0


@pytest.mark.parametrize(
    "browser_headers",
    [
        {},  # the CLI, curl: no Origin, no Sec-Fetch-Site
        {"Origin": OWN_ORIGIN, "Sec-Fetch-Site": "same-origin"},  # the service's own page
        {"Sec-Fetch-Site": "none"},  # typed by the person
    ],
)
def test_json_from_the_own_origin_or_outside_a_browser_is_accepted(
    cookie_client: TestClient, db: Database, browser_headers: dict[str, str]
) -> None:
    headers = {"Content-Type": "application/json; charset=utf-8", **browser_headers}
    response = _send(cookie_client, "POST", URL, body(2), headers)
    assert response.status_code == 202, response.text
    assert _jobs(db) == 1


def test_the_stored_manifest_is_guarded_alike(cookie_client: TestClient, db: Database) -> None:
    url = "/api/contributors/me"
    text_plain = _send(cookie_client, "PUT", url, MANIFEST, {"Content-Type": "text/plain"})
    assert text_plain.status_code == 415
    foreign = _send(
        cookie_client,
        "PUT",
        url,
        MANIFEST,
        {"Content-Type": "application/json", "Origin": "http://127.0.0.1:9999"},
    )
    assert foreign.status_code == 403
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(ContributorProfile)) == 0
    own = _send(cookie_client, "PUT", url, MANIFEST, {"Content-Type": "application/json"})
    assert own.status_code == 201


def test_organization_key_writes_are_guarded_alike(cookie_client: TestClient, db: Database) -> None:
    from pipeline.auth.orgs import create_org

    with db.session() as session:
        org_id = create_org(session, "acme", "alice").id
    url = f"/api/v1/organizations/{org_id}/api-keys"
    key = {"name": "k", "service_id": "platform"}
    assert _send(cookie_client, "POST", url, key, {"Content-Type": "text/plain"}).status_code == 415
    foreign = {"Content-Type": "application/json", "Sec-Fetch-Site": "same-site"}
    assert _send(cookie_client, "POST", url, key, foreign).status_code == 403
    created = _send(cookie_client, "POST", url, key, {"Content-Type": "application/json"})
    assert created.status_code == 201
    key_id = created.json()["key_info"]["key_id"]
    revoke = cookie_client.delete(f"{url}/{key_id}", headers={"Origin": "http://127.0.0.1:9999"})
    assert revoke.status_code == 403
    assert cookie_client.get(url).json()[0]["is_active"] is True
    assert cookie_client.delete(f"{url}/{key_id}").status_code == 200


# --- the session cookie, set by the server -----------------------------------------------------


def _set_cookie(response: Any) -> str:
    [header] = response.headers.get_list("set-cookie")
    return str(header)


def test_the_server_sets_the_session_cookie_httponly_and_strict(
    client: TestClient, settings: Settings, session_token: Callable[..., str]
) -> None:
    response = client.post("/session", json={"token": session_token("alice")})
    assert response.status_code == 200
    assert response.json() == {"user": "alice"}
    cookie = _set_cookie(response)
    assert cookie.startswith(f"{settings.session_cookie_name()}=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # plain HTTP: a Secure cookie would never come back
    assert 0 < int(cookie.split("Max-Age=")[1].split(";")[0]) <= settings.jwt_ttl_seconds
    # The cookie now authenticates the person's reads and (same-origin JSON) writes.
    assert client.get("/api/contributors/me").status_code == 404
    gone = client.delete("/session")
    assert gone.status_code == 200
    assert "Max-Age=0" in _set_cookie(gone) or "expires=" in _set_cookie(gone).lower()
    assert client.get("/api/contributors/me").status_code == 401


def test_the_session_cookie_is_secure_over_https(
    app: Any, session_token: Callable[..., str]
) -> None:
    with TestClient(app, base_url="https://marketplace.example") as client:
        response = client.post("/session", json={"token": session_token("alice")})
    assert response.status_code == 200
    assert "Secure" in _set_cookie(response)


def test_https_behind_a_trusted_proxy_sets_secure_too(
    make_settings: Callable[..., Settings], session_token: Callable[..., str]
) -> None:
    from api.app import create_app

    app = create_app(make_settings(trusted_proxies=["testclient"]))
    with TestClient(app) as client:
        forwarded = {"X-Forwarded-Proto": "https"}
        response = client.post("/session", json={"token": session_token()}, headers=forwarded)
        assert "Secure" in _set_cookie(response)
    app.state.db.dispose()
    untrusted = create_app(make_settings())
    with TestClient(untrusted) as client:
        response = client.post("/session", json={"token": session_token()}, headers=forwarded)
        assert "Secure" not in _set_cookie(response)
    untrusted.state.db.dispose()


@pytest.mark.parametrize("token", ["not-a-jwt", "x" * 5_000])
def test_a_bad_token_sets_no_cookie(client: TestClient, token: str) -> None:
    response = client.post("/session", json={"token": token})
    assert response.status_code in (400, 401)
    assert "set-cookie" not in response.headers


def test_the_session_endpoint_refuses_other_origins_and_forms(
    client: TestClient, session_token: Callable[..., str]
) -> None:
    token = session_token("mallory")
    plain = client.post(
        "/session", content=f'{{"token": "{token}"}}', headers={"Content-Type": "text/plain"}
    )
    assert plain.status_code == 415
    foreign = client.post(
        "/session", json={"token": token}, headers={"Origin": "http://127.0.0.1:9999"}
    )
    assert foreign.status_code == 403
    assert "set-cookie" not in plain.headers and "set-cookie" not in foreign.headers


def test_a_trusted_proxy_may_name_the_host_the_browser_addressed(
    make_settings: Callable[..., Settings], session_token: Callable[..., str], db: Database
) -> None:
    """Behind a proxy that rewrites `Host`, its X-Forwarded-Host is the origin to compare."""
    from api.app import create_app

    origin = {"Origin": "https://marketplace.example", "Content-Type": "application/json"}
    forwarded = {"X-Forwarded-Host": "marketplace.example"}
    for proxies, expected in ((["testclient"], 202), ([], 403)):
        app = create_app(make_settings(trusted_proxies=proxies))
        with TestClient(app) as client:
            client.cookies.set(app.state.settings.session_cookie_name(), session_token("alice"))
            response = _send(client, "POST", URL, body(2), {**origin, **forwarded})
            assert response.status_code == expected, response.text
        app.state.db.dispose()
