"""FastAPI dependencies: settings, database, object store, the three kinds of caller, and
the model-owner check on routes that change a model's ground truth."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, HTTPException, Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor

from pipeline.auth.sessions import Identity, admin_identity, decode_token
from pipeline.auth.verification import KeyPrincipal, KeyVerifier
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import Forbidden, Unauthenticated
from pipeline.core.tables import INT32_MAX
from pipeline.models.registry import require_model_owner
from pipeline.settlement.claim_events import ClaimsReader
from pipeline.settlement.claims import ClaimedReader
from pipeline.store.objectstore import ObjectStore

# Model ids are 32-bit integers in the database: a larger id is a bad request (400), not a
# lookup that overflows.
ModelId = Annotated[int, Path(description="model id", ge=1, le=INT32_MAX)]


class UuidConvertor(Convertor[str]):
    """`{name:any_uuid}`: a UUID in either case; any other text matches no route (404).

    Starlette's own `uuid` convertor matches lower case only, and key ids are accepted in
    upper case too.
    """

    regex = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"

    def convert(self, value: str) -> str:
        return str(uuid.UUID(value))

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("any_uuid", UuidConvertor())

# The credentials of spec §5, declared so the OpenAPI document says which one each operation
# takes. They only document: the dependencies below read and check the header themselves, and
# auto_error=False keeps FastAPI from answering 403 on its own.
ADMIN_TOKEN = HTTPBearer(
    scheme_name="AdminToken",
    description="`Authorization: Bearer <ADMIN_TOKEN>` (key management, spec §4.6)",
    auto_error=False,
)
SESSION_TOKEN = HTTPBearer(
    scheme_name="SessionToken",
    description="`Authorization: Bearer <session JWT>`; the session cookie works too",
    auto_error=False,
)
PLATFORM_KEY = HTTPBearer(
    scheme_name="PlatformApiKey",
    description="`Authorization: Bearer <API key>` of a `platform` key (spec §5)",
    auto_error=False,
)
Credentials = HTTPAuthorizationCredentials | None


# The dependencies below are `async def` although they never wait: FastAPI runs a plain `def`
# dependency in a worker thread, a hop through the thread pool and back for each of them on
# every request. They only read the app's state or check a token's signature (well under a
# millisecond), so they run on the event loop; under 50 concurrent contributors the five hops
# of a contribution's dependencies cost about 25 ms each (bench/load.py, issue 19).
async def request_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_db(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


async def get_claimed_reader(request: Request) -> ClaimedReader:
    """What wallets claimed on chain (pipeline.settlement.claims); tests put their own chain."""
    reader: ClaimedReader = request.app.state.claimed_reader
    return reader


async def get_claims_reader(request: Request) -> ClaimsReader:
    """The claims wallets made, from the chain's events; tests put their own chain."""
    reader: ClaimsReader = request.app.state.claims_reader
    return reader


async def get_store(request: Request) -> ObjectStore:
    store: ObjectStore = request.app.state.store
    return store


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


async def current_user(
    request: Request,
    settings: Settings = Depends(request_settings),
    _: Credentials = Security(SESSION_TOKEN),
) -> Identity:
    """Session auth (spec §5): cookie `<service>_access_token` or `Authorization: Bearer`."""
    token = request.cookies.get(settings.session_cookie_name()) or bearer_token(request)
    if not token:
        raise Unauthenticated("authentication required")
    return decode_token(settings, token)


async def admin_user(
    request: Request,
    settings: Settings = Depends(request_settings),
    _: Credentials = Security(ADMIN_TOKEN),
) -> Identity:
    """Key management auth (spec §5): `Authorization: Bearer <ADMIN_TOKEN>`."""
    token = bearer_token(request)
    if not token:
        raise Unauthenticated("missing admin token")
    return admin_identity(settings, token)


def client_ip(request: Request) -> str | None:
    """The caller's address as `api.client_address.ClientAddress` decided it (TRUSTED_PROXIES)."""
    return request.client.host if request.client else None


def served_over_https(request: Request, settings: Settings) -> bool:
    """Whether the browser reached the service over HTTPS: directly, or through a trusted proxy
    that says so in X-Forwarded-Proto (the same trust rule as `client_ip`)."""
    if request.url.scheme == "https":
        return True
    peer = request.client.host if request.client else None
    forwarded = request.headers.get("x-forwarded-proto", "")
    return bool(peer and peer in settings.trusted_proxies) and forwarded.strip() == "https"


def public_host(request: Request, settings: Settings) -> str:
    """The host (and port) the browser addressed: `Host`, or a trusted proxy's X-Forwarded-Host
    when the proxy rewrote `Host` (the same trust rule as `client_ip`)."""
    peer = request.client.host if request.client else None
    forwarded = request.headers.get("x-forwarded-host", "").split(",", 1)[0].strip()
    if forwarded and peer and peer in settings.trusted_proxies:
        return forwarded.lower()
    return request.headers.get("host", "").strip().lower()


# --- writes a browser may send with the session cookie (CSRF) -----------------------------------

# A page of another site, or of another origin of the same site (another port of the same host),
# is not the service's own page.
FOREIGN_FETCH_SITES = frozenset({"cross-site", "same-site"})
JSON_MEDIA_TYPE = "application/json"
# What the routes guarded below may answer besides their own statuses (OpenAPI `responses`).
CROSS_ORIGIN_RESPONSE: dict[int | str, dict[str, Any]] = {
    403: {"description": "sent by a page of another origin (Origin, Sec-Fetch-Site)"}
}
JSON_ONLY_RESPONSES: dict[int | str, dict[str, Any]] = {
    **CROSS_ORIGIN_RESPONSE,
    415: {"description": "the body is not `application/json`"},
}


def same_origin_request(request: Request) -> None:
    """403 unless the request comes from the service's own pages or from outside a browser.

    The session cookie rides along on any request the browser sends to the service, including a
    form another page submits; that page cannot choose the Origin and Sec-Fetch-Site headers the
    browser adds. A client outside a browser (the CLI, curl) sends neither, and is let through.
    """
    site = request.headers.get("sec-fetch-site", "").strip().lower()
    if site in FOREIGN_FETCH_SITES:
        raise Forbidden("refused: the request was sent by a page of another origin")
    origin = request.headers.get("origin")
    if origin is None:
        return
    host = public_host(request, request.app.state.settings)
    if origin.strip().lower() == "null" or urlsplit(origin.strip()).netloc.lower() != host:
        raise Forbidden("refused: the request was sent by a page of another origin")


async def json_write_request(request: Request) -> None:
    """`same_origin_request`, then 415 unless the body is declared `application/json`.

    A plain HTML form can only send `application/x-www-form-urlencoded`, `multipart/form-data`
    or `text/plain` without a CORS preflight, so requiring JSON keeps forms of other pages out.
    """
    same_origin_request(request)
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != JSON_MEDIA_TYPE:
        raise HTTPException(415, f"the request body must be {JSON_MEDIA_TYPE}")


def get_key_verifier(request: Request) -> KeyVerifier:
    """The app's key verifier (rate limiter and last-used throttle), made once in create_app."""
    verifier: KeyVerifier = request.app.state.key_verifier
    return verifier


def platform_key(scope: str | None = None) -> Callable[..., Awaitable[KeyPrincipal]]:
    """Dependency factory: a verified `platform` API key with `scope` (spec §5).

    Checks active, unexpired, service `platform`, allowed_ips, scope, then counts the request
    against the key's rate_limit_per_hour (429 with Retry-After when over it). Async, with the
    blocking check in one worker-thread hop: this runs on every platform request.
    """

    async def dependency(request: Request, _: Credentials = Security(PLATFORM_KEY)) -> KeyPrincipal:
        token = bearer_token(request)
        if not token:
            raise Unauthenticated("missing API key")
        return await run_in_threadpool(
            get_key_verifier(request).use,
            token,
            client_ip=client_ip(request),
            service_id="platform",
            scope=scope,
        )

    return dependency


# A model id as path text: ASCII digits, at most 10 (a 32-bit id), checked before int().
MODEL_ID_TEXT = re.compile(r"[0-9]{1,10}")


def model_owner_key(scope: str) -> Callable[..., Awaitable[KeyPrincipal]]:
    """Dependency factory: a platform key with `scope` acting for the owner of `{model_id}`.

    After the key checks of `platform_key`: 404 for an unknown model, 403 {detail} unless the
    key acts for the model's owner (`pipeline.models.registry.acts_for_owner`). It runs before the
    route reads the request body, so a refused upload stores nothing. The id is read from the
    path here rather than declared, so the route's own declaration (and its OpenAPI schema)
    stays the only one; an id that is not an integer in range is left to the route's
    validation (400).
    """
    key_dependency = platform_key(scope)

    async def dependency(
        request: Request, principal: KeyPrincipal = Depends(key_dependency)
    ) -> KeyPrincipal:
        raw = str(request.path_params["model_id"])
        if not MODEL_ID_TEXT.fullmatch(raw) or not 1 <= int(raw) <= INT32_MAX:
            return principal
        model_id = int(raw)
        await run_in_threadpool(
            require_model_owner,
            await get_db(request),
            model_id,
            principal.user_id,
            principal.org_id,
        )
        return principal

    return dependency
