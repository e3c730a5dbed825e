"""Organization-scoped keys (spec §4.7) under the §5 role matrix, and the `orgs` CLI."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pipeline.auth.orgs import Role, create_org, find_org, remove_member, set_member
from pipeline.core.db import Database
from pipeline.core.errors import Conflict, NotFound
from tests.conftest import TEST_ADMIN_TOKEN

# Members of org "acme" by role; "oscar" owns the other org "globex"; "zed" belongs to none.
MEMBERS = {"olivia": Role.OWNER, "adam": Role.ADMIN, "dora": Role.DEVELOPER, "vera": Role.VIEWER}
DAN = "dan"  # a second Developer of acme


@pytest.fixture
def orgs(db: Database) -> dict[str, str]:
    with db.session() as session:
        acme = create_org(session, "acme", "olivia")
        for user, role in MEMBERS.items():
            set_member(session, acme, user, role)
        set_member(session, acme, DAN, Role.DEVELOPER)
        globex = create_org(session, "globex", "oscar")
        return {"acme": acme.id, "globex": globex.id}


@pytest.fixture
def as_user(session_token: Callable[..., str]) -> Callable[[str], dict[str, str]]:
    return lambda user: {"Authorization": f"Bearer {session_token(user)}"}


def keys_url(org_id: str, key_id: str | None = None) -> str:
    base = f"/api/v1/organizations/{org_id}/api-keys"
    return f"{base}/{key_id}" if key_id else base


def make_key(client: TestClient, headers: dict[str, str], org_id: str, **body: Any) -> dict:
    body.setdefault("name", "org key")
    body.setdefault("service_id", "platform")
    response = client.post(keys_url(org_id), json=body, headers=headers)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


# --- the role matrix (spec §5): 4 roles x create / list / revoke ---------------------------------

CAN_CREATE = {Role.OWNER: True, Role.ADMIN: True, Role.DEVELOPER: True, Role.VIEWER: False}


@pytest.mark.parametrize("user", list(MEMBERS))
def test_create_by_role(client: TestClient, orgs, as_user, user: str) -> None:
    response = client.post(
        keys_url(orgs["acme"]),
        json={
            "name": "k",
            "service_id": "prediction",
            "scopes": ["predict"],
            "environment": "test",
        },
        headers=as_user(user),
    )
    if CAN_CREATE[MEMBERS[user]]:
        assert response.status_code == 201, response.text
        body = response.json()
        assert set(body) == {"api_key", "key_info"}
        assert body["api_key"].startswith("mk_test_")
        assert body["key_info"]["user_id"] == user
        assert body["key_info"]["service_id"] == "prediction"
        assert body["key_info"]["scopes"] == ["predict"]
        assert body["key_info"]["environment"] == "test"
    else:
        assert response.status_code == 403
        assert set(response.json()) == {"detail"}


@pytest.mark.parametrize("user", list(MEMBERS))
def test_every_member_lists_all_org_keys(client: TestClient, orgs, as_user, user: str) -> None:
    mine = make_key(client, as_user("dora"), orgs["acme"], name="dora's")
    boss = make_key(client, as_user("olivia"), orgs["acme"], name="olivia's")
    make_key(client, as_user("oscar"), orgs["globex"], name="globex's")
    response = client.get(keys_url(orgs["acme"]), headers=as_user(user))
    assert response.status_code == 200
    listing = response.json()
    assert {k["key_id"] for k in listing} == {
        mine["key_info"]["key_id"],
        boss["key_info"]["key_id"],
    }
    assert all("api_key" not in k for k in listing)
    assert mine["api_key"] not in response.text and boss["api_key"] not in response.text


REVOKE = {
    # role: (may revoke own key, may revoke someone else's key)
    Role.OWNER: (True, True),
    Role.ADMIN: (True, True),
    Role.DEVELOPER: (True, False),
    Role.VIEWER: (False, False),
}


@pytest.mark.parametrize("user", list(MEMBERS))
def test_revoke_by_role(client: TestClient, orgs, as_user, user: str) -> None:
    acme = orgs["acme"]
    others = make_key(client, as_user(DAN), acme, name="dan's")
    own_ok, others_ok = REVOKE[MEMBERS[user]]
    own = make_key(client, as_user(user), acme) if own_ok else None

    response = client.delete(keys_url(acme, others["key_info"]["key_id"]), headers=as_user(user))
    assert response.status_code == (200 if others_ok else 403), response.text
    whoami = client.get(
        "/api/v1/whoami", headers={"Authorization": f"Bearer {others['api_key']}"}
    ).status_code
    assert whoami == (401 if others_ok else 200)
    if others_ok:
        assert set(response.json()) == {"message"}
    else:
        assert set(response.json()) == {"detail"}

    if own is not None:
        response = client.delete(keys_url(acme, own["key_info"]["key_id"]), headers=as_user(user))
        assert response.status_code == 200
        listing = client.get(keys_url(acme), headers=as_user(user)).json()
        assert [k["is_active"] for k in listing if k["key_id"] == own["key_info"]["key_id"]] == [
            False
        ]


def test_viewer_is_refused_before_the_key_is_looked_up(client: TestClient, orgs, as_user) -> None:
    response = client.delete(
        keys_url(orgs["acme"], "00000000-0000-0000-0000-000000000000"), headers=as_user("vera")
    )
    assert response.status_code == 403


# --- non-members, other orgs, authentication -----------------------------------------------------


def test_non_member_is_403_for_every_operation(client: TestClient, orgs, as_user) -> None:
    key = make_key(client, as_user("olivia"), orgs["acme"])
    zed = as_user("zed")
    body = {"name": "k", "service_id": "platform"}
    create = client.post(keys_url(orgs["acme"]), json=body, headers=zed)
    listing = client.get(keys_url(orgs["acme"]), headers=zed)
    revoke = client.delete(keys_url(orgs["acme"], key["key_info"]["key_id"]), headers=zed)
    assert [create.status_code, listing.status_code, revoke.status_code] == [403, 403, 403]
    assert all(set(r.json()) == {"detail"} for r in (create, listing, revoke))


def test_member_of_another_org_is_403(client: TestClient, orgs, as_user) -> None:
    assert client.get(keys_url(orgs["acme"]), headers=as_user("oscar")).status_code == 403


@pytest.mark.parametrize(
    "org_id", ["00000000-0000-0000-0000-000000000000", "acme", "%00", "x" * 99]
)
def test_unknown_or_malformed_org_is_403_like_a_non_member(client, orgs, as_user, org_id) -> None:
    response = client.get(keys_url(org_id), headers=as_user("olivia"))
    assert response.status_code == 403
    assert set(response.json()) == {"detail"}


def test_key_of_another_org_is_404(client: TestClient, orgs, as_user) -> None:
    foreign = make_key(client, as_user("oscar"), orgs["globex"])
    response = client.delete(
        keys_url(orgs["acme"], foreign["key_info"]["key_id"]), headers=as_user("olivia")
    )
    assert response.status_code == 404
    assert set(response.json()) == {"detail"}
    whoami = client.get("/api/v1/whoami", headers={"Authorization": f"Bearer {foreign['api_key']}"})
    assert whoami.status_code == 200  # untouched


def test_personal_key_is_not_an_org_key(client: TestClient, orgs, as_user, platform_key) -> None:
    platform_key(user_id="olivia")
    assert client.get(keys_url(orgs["acme"]), headers=as_user("olivia")).json() == []


@pytest.mark.parametrize("key_id", ["nope", "00000000-0000-0000-0000-000000000000", "%00"])
def test_unknown_or_malformed_key_id_is_404(client, orgs, as_user, key_id: str) -> None:
    response = client.delete(keys_url(orgs["acme"], key_id), headers=as_user("olivia"))
    assert response.status_code == 404


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer not-a-jwt"},
        {"Authorization": f"Bearer {TEST_ADMIN_TOKEN}"},  # the static admin token is no JWT
    ],
    ids=["missing", "garbage", "static admin token"],
)
def test_missing_or_invalid_jwt_is_401(client: TestClient, orgs, headers) -> None:
    url = keys_url(orgs["acme"])
    for response in (
        client.post(url, json={"name": "k", "service_id": "platform"}, headers=headers),
        client.get(url, headers=headers),
        client.delete(
            keys_url(orgs["acme"], "00000000-0000-0000-0000-000000000000"), headers=headers
        ),
    ):
        assert response.status_code == 401
        assert set(response.json()) == {"detail"}


def test_session_cookie_works_too(client: TestClient, orgs, session_token, settings) -> None:
    client.cookies.set(settings.session_cookie_name(), session_token("vera"))
    try:
        assert client.get(keys_url(orgs["acme"])).status_code == 200
    finally:
        client.cookies.clear()


# --- bodies and behaviour ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"service_id": "platform"},
        {"name": "x" * 101, "service_id": "platform"},
        {"name": "k", "service_id": "other"},
        {"name": "k", "service_id": "platform", "environment": "prod"},
        {"name": "k", "service_id": "platform", "scopes": [1]},
        {"name": "k", "service_id": "platform", "allowed_ips": ["1.2.3.4/40"]},
    ],
)
def test_invalid_body_is_400(client: TestClient, orgs, as_user, body) -> None:
    response = client.post(keys_url(orgs["acme"]), json=body, headers=as_user("adam"))
    assert response.status_code == 400
    assert set(response.json()) == {"detail"}


def test_org_key_authenticates_and_names_its_org(client: TestClient, orgs, as_user) -> None:
    created = make_key(client, as_user("dora"), orgs["acme"], scopes=["arrivals:read"])
    response = client.get(
        "/api/v1/whoami", headers={"Authorization": f"Bearer {created['api_key']}"}
    )
    assert response.status_code == 200
    assert response.json()["org_id"] == orgs["acme"]
    assert response.json()["user_id"] == "dora"


def test_org_keys_stay_out_of_the_personal_key_endpoints(
    client: TestClient, orgs, as_user, session_token
) -> None:
    created = make_key(client, as_user("dora"), orgs["acme"])
    dora_admin = {"Authorization": f"Bearer {session_token('dora', admin=True)}"}
    assert client.get("/api/v1/keys", headers=dora_admin).json() == []
    key_id = created["key_info"]["key_id"]
    assert client.delete(f"/api/v1/keys/{key_id}", headers=dora_admin).status_code == 404


def test_org_list_filters(client: TestClient, orgs, as_user) -> None:
    a = make_key(client, as_user("adam"), orgs["acme"], name="a")["key_info"]["key_id"]
    b = make_key(client, as_user("adam"), orgs["acme"], name="b", service_id="prediction")
    client.delete(keys_url(orgs["acme"], a), headers=as_user("adam"))

    def ids(**params: Any) -> set[str]:
        response = client.get(keys_url(orgs["acme"]), params=params, headers=as_user("vera"))
        return {k["key_id"] for k in response.json()}

    assert ids() == {a, b["key_info"]["key_id"]}
    assert ids(active_only="true") == {b["key_info"]["key_id"]}
    assert ids(service_id="platform") == {a}


# --- CLI: marketplace orgs ------------------------------------------------------------------------


@pytest.fixture
def cli(settings, monkeypatch) -> Any:
    from cli.main import main
    from pipeline.core.config import get_settings

    monkeypatch.setenv("MARKETPLACE_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("DATABASE_URL", settings.resolved_database_url)
    get_settings.cache_clear()
    yield main
    get_settings.cache_clear()


def test_cli_orgs_create_add_member_list(cli, capsys, client, db, as_user) -> None:
    assert cli(["orgs", "create", "initech", "--owner", "peter"]) == 0
    org_id = capsys.readouterr().out.strip().splitlines()[-1]
    assert cli(["orgs", "add-member", org_id, "milton", "developer"]) == 0
    assert cli(["orgs", "add-member", "initech", "bill", "Viewer"]) == 0  # by name
    capsys.readouterr()
    assert cli(["orgs", "list", "--members"]) == 0
    listing = capsys.readouterr().out
    assert f"{org_id}\tinitech\tmembers=3" in listing
    assert "\tpeter\tOwner" in listing and "\tmilton\tDeveloper" in listing
    with db.session() as session:
        assert find_org(session, "initech").id == org_id

    # The CLI-made org works over HTTP: the Developer creates, the Viewer only reads.
    assert make_key(client, as_user("milton"), org_id)["key_info"]["user_id"] == "milton"
    viewer = client.post(
        keys_url(org_id), json={"name": "k", "service_id": "platform"}, headers=as_user("bill")
    )
    assert viewer.status_code == 403

    # Changing a role takes effect on the next request.
    assert cli(["orgs", "add-member", org_id, "bill", "Admin"]) == 0
    assert make_key(client, as_user("bill"), org_id)["key_info"]["user_id"] == "bill"


@pytest.mark.parametrize(
    "argv",
    [
        ["orgs", "add-member", "no-such-org", "x", "Viewer"],
        ["orgs", "add-member", "initech", "x", "Superuser"],
        ["orgs", "create", "initech", "--owner", "someone"],  # duplicate name
    ],
    ids=["unknown org", "unknown role", "duplicate"],
)
def test_cli_orgs_errors_exit_1(cli, capsys, argv) -> None:
    assert cli(["orgs", "create", "initech", "--owner", "peter"]) == 0
    capsys.readouterr()
    assert cli(argv) == 1
    assert capsys.readouterr().err.startswith("marketplace: ")


# --- membership is live (issue 13) ----------------------------------------------------------------


def whoami(client: TestClient, api_key: str) -> Any:
    return client.get("/api/v1/whoami", headers={"Authorization": f"Bearer {api_key}"})


def verify(client: TestClient, api_key: str) -> dict[str, Any]:
    response = client.post("/api/v1/keys/verify", json={"api_key": api_key})
    assert response.status_code == 200
    result: dict[str, Any] = response.json()
    return result


def test_removed_member_keys_stop_on_the_next_request(
    client: TestClient, orgs, as_user, db: Database
) -> None:
    acme = orgs["acme"]
    doras = [make_key(client, as_user("dora"), acme, name=f"dora {i}") for i in range(2)]
    dans = make_key(client, as_user(DAN), acme, name="dan's")
    with db.session() as session:
        set_member(session, find_org(session, "globex"), "dora", Role.DEVELOPER)
    globex_key = make_key(client, as_user("dora"), orgs["globex"], name="dora at globex")
    for key in [*doras, dans, globex_key]:
        assert whoami(client, key["api_key"]).status_code == 200

    with db.session() as session:
        assert remove_member(session, find_org(session, "acme"), "dora") == 2

    for key in doras:
        assert whoami(client, key["api_key"]).status_code == 401
        assert verify(client, key["api_key"]) == {"valid": False, "reason": "invalid"}
    # Only her keys in that organization: another member's, and her keys elsewhere, still work.
    assert whoami(client, dans["api_key"]).status_code == 200
    assert whoami(client, globex_key["api_key"]).status_code == 200
    listing = {k["key_id"]: k for k in client.get(keys_url(acme), headers=as_user("olivia")).json()}
    assert [listing[k["key_info"]["key_id"]]["is_active"] for k in doras] == [False, False]
    # Her session no longer reaches the organization either.
    assert client.get(keys_url(acme), headers=as_user("dora")).status_code == 403
    # Coming back does not bring revoked keys back.
    with db.session() as session:
        set_member(session, find_org(session, "acme"), "dora", Role.DEVELOPER)
    assert whoami(client, doras[0]["api_key"]).status_code == 401


def test_role_change_applies_to_the_next_call(
    client: TestClient, orgs, as_user, db: Database
) -> None:
    acme = orgs["acme"]
    key = make_key(client, as_user("dora"), acme)
    assert whoami(client, key["api_key"]).status_code == 200

    with db.session() as session:
        set_member(session, find_org(session, "acme"), "dora", Role.VIEWER)
    refused = whoami(client, key["api_key"])
    assert refused.status_code == 403
    assert set(refused.json()) == {"detail"} and "Viewer" in refused.json()["detail"]
    assert verify(client, key["api_key"]) == {"valid": False, "reason": "member_role"}
    assert (
        client.post(
            keys_url(acme), json={"name": "k", "service_id": "platform"}, headers=as_user("dora")
        ).status_code
        == 403
    )

    with db.session() as session:
        set_member(session, find_org(session, "acme"), "dora", Role.ADMIN)
    assert whoami(client, key["api_key"]).status_code == 200
    # As Admin she now revokes another member's key, which a Developer could not.
    others = make_key(client, as_user(DAN), acme)
    assert (
        client.delete(
            keys_url(acme, others["key_info"]["key_id"]), headers=as_user("dora")
        ).status_code
        == 200
    )


def test_the_last_owner_can_be_neither_removed_nor_demoted(orgs, db: Database) -> None:
    with db.session() as session:
        acme = find_org(session, "acme")
        with pytest.raises(Conflict):
            remove_member(session, acme, "olivia")
        with pytest.raises(Conflict):
            set_member(session, acme, "olivia", Role.ADMIN)
        set_member(session, acme, "adam", Role.OWNER)
        set_member(session, acme, "olivia", Role.ADMIN)  # another Owner remains
        with pytest.raises(NotFound):
            remove_member(session, acme, "zed")


def test_cli_remove_member_revokes_their_keys(cli, capsys, client, as_user) -> None:
    assert cli(["orgs", "create", "initech", "--owner", "peter"]) == 0
    org_id = capsys.readouterr().out.strip().splitlines()[-1]
    assert cli(["orgs", "add-member", "initech", "milton", "Developer"]) == 0
    key = make_key(client, as_user("milton"), org_id)
    assert whoami(client, key["api_key"]).status_code == 200
    capsys.readouterr()

    assert cli(["orgs", "remove-member", "initech", "milton"]) == 0
    assert "1 of their keys revoked" in capsys.readouterr().out
    assert whoami(client, key["api_key"]).status_code == 401
    assert cli(["orgs", "remove-member", "initech", "peter"]) == 1  # the last Owner stays


# --- the plan and limits of an org key are the organization's (spec §4.7; issue 21 row 11) -----

PLAN_AND_LIMITS = {
    "billing_plan": "enterprise",
    "rate_limit_per_hour": 100_000,
    "monthly_prediction_limit": None,
}


@pytest.mark.parametrize("field", list(PLAN_AND_LIMITS))
def test_a_developer_may_not_set_the_plan_or_limits_of_an_org_key(
    client: TestClient, orgs, as_user, field: str
) -> None:
    body = {"name": "k", "service_id": "prediction", field: PLAN_AND_LIMITS[field]}
    response = client.post(keys_url(orgs["acme"]), json=body, headers=as_user("dora"))
    assert response.status_code == 403
    assert field in response.json()["detail"]
    listed = client.get(keys_url(orgs["acme"]), headers=as_user("olivia")).json()
    assert listed == []


def test_a_developers_org_key_gets_the_default_plan_and_limits(
    client: TestClient, orgs, as_user
) -> None:
    body = {"name": "k", "service_id": "platform", "scopes": ["arrivals:read"]}
    info = make_key(client, as_user("dora"), orgs["acme"], **body, environment="test")["key_info"]
    assert info["billing_plan"] == "free"
    assert info["rate_limit_per_hour"] == 1000
    assert info["monthly_prediction_limit"] is None
    # Fields that only narrow a key stay open to Developers.
    narrowed = make_key(
        client, as_user("dora"), orgs["acme"], expires_in_days=7, allowed_ips=["10.0.0.0/8"]
    )["key_info"]
    assert narrowed["expires_at"] is not None


@pytest.mark.parametrize("user", ["olivia", "adam"])
def test_owners_and_admins_set_the_plan_and_limits_of_an_org_key(
    client: TestClient, orgs, as_user, user: str
) -> None:
    body = {**PLAN_AND_LIMITS, "monthly_prediction_limit": 5_000}
    info = make_key(client, as_user(user), orgs["acme"], **body)["key_info"]
    assert info["billing_plan"] == "enterprise"
    assert info["rate_limit_per_hour"] == 100_000
    assert info["monthly_prediction_limit"] == 5_000
