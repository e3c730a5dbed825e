"""Web pages for contributors: the model list and the data-spec-driven contribution form.

The pages are server-rendered shells; the form itself is built in the browser from the model's
data-spec (fetched at run time from `/api/models/{id}/data-spec`) by `static/contribute.js`,
which reads CSV files (Papa Parse) or typed rows, validates them with the same JSON Schema (Ajv;
both vendored in `static/vendor/`), measures them against the pipeline's §8 thresholds, which
this module renders into the page from `pipeline.checks.quality.QualityThresholds`, and posts them
to the contributions endpoint with the session cookie.

The session cookie is set by the server (`POST /session` with a token the person pastes), as
`HttpOnly`: no script of the page reads or writes it.
"""

from __future__ import annotations

import html
import time
from pathlib import Path
from string import Template
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
)
from pydantic import BaseModel, ConfigDict, Field

from api.deps import (
    MODEL_ID_TEXT,
    get_claimed_reader,
    get_claims_reader,
    get_db,
    get_store,
    json_write_request,
    request_settings,
    same_origin_request,
    served_over_https,
)
from pipeline.auth.sessions import decode_token
from pipeline.checks.quality import QualityThresholds
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput, NotFound, Unauthenticated
from pipeline.models.registry import get_model, list_models
from pipeline.rewards.budget import try_level
from pipeline.rewards.formula import FULL_VOLUME_ROWS, volume_factor
from pipeline.rewards.ledger import wallet_rewards
from pipeline.settlement.claim_events import ClaimsReader
from pipeline.settlement.claims import ClaimedReader, last_settled, wallet_settlement
from pipeline.settlement.wallet_proof import wallet_status
from pipeline.store.objectstore import ObjectStore

router = APIRouter(tags=["web"], include_in_schema=False)

WEB_DIR = Path(__file__).resolve().parent.parent
STATIC_DIR = WEB_DIR / "static"
# A session JWT is a few hundred characters; a longer "token" is not one.
MAX_TOKEN_CHARS = 4096
TEMPLATE_DIR = WEB_DIR / "templates"

# Only these files are served; nothing else under api/ is reachable through /static/.
STATIC_FILES: dict[str, str] = {
    "contribute.js": "text/javascript; charset=utf-8",
    "rowcheck.js": "text/javascript; charset=utf-8",
    "web.css": "text/css; charset=utf-8",
    "vendor/ajv2020.bundle.js": "text/javascript; charset=utf-8",
    "vendor/papaparse.min.js": "text/javascript; charset=utf-8",
}

# Ajv compiles schemas with `new Function`, hence 'unsafe-eval'; no inline script or style.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self' 'unsafe-eval'; style-src 'self'; "
        "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _template(name: str) -> Template:
    return Template((TEMPLATE_DIR / name).read_text(encoding="utf-8"))


def _page(name: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    """Render a template; every value is HTML-escaped unless its name ends in `_html`."""
    escaped = {
        key: (str(value) if key.endswith("_html") else html.escape(str(value), quote=True))
        for key, value in values.items()
    }
    body = _template(name).substitute(escaped)
    return HTMLResponse(body, status_code=status_code, headers=SECURITY_HEADERS)


def _not_found(message: str) -> HTMLResponse:
    return _page("not_found.html", status_code=404, message=message)


def session_user(request: Request, settings: Settings) -> tuple[str | None, str]:
    """The signed-in user id from the session cookie, or None and why not."""
    token = request.cookies.get(settings.session_cookie_name())
    if not token:
        return None, "no session cookie"
    try:
        return decode_token(settings, token).user_id, ""
    except Unauthenticated as exc:
        return None, f"the session cookie holds an {exc.detail}"


class SessionStart(BaseModel):
    """A session token to keep as the session cookie."""

    model_config = ConfigDict(extra="forbid")

    token: str = Field(min_length=1, max_length=MAX_TOKEN_CHARS)


@router.post("/session", dependencies=[Depends(json_write_request)])
def start_session(
    body: SessionStart, request: Request, settings: Settings = Depends(request_settings)
) -> JSONResponse:
    """Check a session token and set it as the session cookie, out of the page scripts' reach.

    `HttpOnly` (no script reads it, so an injected one cannot take it away), `SameSite=Strict`,
    `Secure` when the page was served over HTTPS, kept until the token's `exp`.
    """
    identity = decode_token(settings, body.token)
    now = int(time.time())
    max_age = max(0, (identity.expires_at or now) - now)
    response = JSONResponse({"user": identity.user_id}, headers={"Cache-Control": "no-store"})
    response.set_cookie(
        settings.session_cookie_name(),
        body.token,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=served_over_https(request, settings),
    )
    return response


@router.delete("/session", dependencies=[Depends(same_origin_request)])
def end_session(request: Request, settings: Settings = Depends(request_settings)) -> JSONResponse:
    """Forget the session cookie."""
    response = JSONResponse({"user": None}, headers={"Cache-Control": "no-store"})
    response.delete_cookie(
        settings.session_cookie_name(),
        path="/",
        httponly=True,
        samesite="strict",
        secure=served_over_https(request, settings),
    )
    return response


@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/models", status_code=307)


@router.get("/models", response_class=HTMLResponse)
def models_page(db: Database = Depends(get_db)) -> HTMLResponse:
    row = _template("model_row.html")
    with db.session() as session:
        rows = [
            row.substitute(
                id=model.id,
                name=html.escape(model.name),
                task_type=html.escape(model.task_type or ""),
                description=html.escape(model.description or ""),
            )
            for model in list_models(session)
        ]
    listing = "\n".join(rows) or _template("no_models.html").template
    return _page("models.html", models_html=listing, count=len(rows))


@router.get("/models/{model_id}/contribute", response_class=HTMLResponse)
def contribute_page(
    model_id: str,
    request: Request,
    db: Database = Depends(get_db),
    settings: Settings = Depends(request_settings),
) -> HTMLResponse:
    # ASCII digits of a 32-bit id only, checked before int(): str.isdigit() also accepts "²",
    # which int() refuses, and int() refuses more than 4,300 digits.
    if not MODEL_ID_TEXT.fullmatch(model_id):
        return _not_found("There is no such model.")
    try:
        with db.session() as session:
            model = get_model(session, int(model_id))
            name, description = model.name, model.description or ""
            identifier = model.id
            field_count = len((model.data_spec or {}).get("properties") or {})
            minimum = float(model.min_improvement_pct)
    except NotFound:
        return _not_found(f"There is no model {model_id}.")
    user, why = session_user(request, settings)
    return _page(
        "contribute.html",
        model_id=identifier,
        model_name=name,
        model_description=description,
        cookie_name=settings.session_cookie_name(),
        user=user or "",
        session_problem=why,
        **_rule_values(settings, QualityThresholds(), field_count),
        min_improvement_pct=f"{minimum:g}",
        first_try_confidence=f"{100 * (1 - try_level(settings.reward_try_budget, 1)):g}",
        second_try_confidence=f"{100 * (1 - try_level(settings.reward_try_budget, 2)):.2f}",
    )


def _pct(share: float) -> str:
    return f"{share * 100:g}"


def _rule_values(settings: Settings, limits: QualityThresholds, field_count: int) -> dict[str, Any]:
    """The §8 thresholds and the reward rule as the page shows them and its script uses them."""
    column_rule = (
        f"each field filled in more than {_pct(limits.column_completeness_above)} % of the rows"
        + (
            " (DATA_VALIDATION_STRICT is on: a field below that rejects the contribution);"
            if settings.data_validation_strict
            else " (otherwise a warning, not a rejection);"
        )
    )
    extra = [f'<li data-check="column_completeness">{html.escape(column_rule)}</li>']
    if settings.enable_pii_detection:
        extra.append(
            '<li data-check="pii">no personal data in text values (e-mail addresses, phone, '
            "credit card and US social security numbers, IBANs, IP and URL addresses, "
            "wallet addresses).</li>"
        )
    examples = ", ".join(
        f"{rows:,} rows × {volume_factor(rows):g}" for rows in (100, 1_000, FULL_VOLUME_ROWS)
    )
    return {
        "min_rows": limits.min_rows,
        "completeness_above": limits.completeness_above,
        "uniqueness_above": limits.uniqueness_above,
        "column_completeness_above": limits.column_completeness_above,
        "completeness_pct": _pct(limits.completeness_above),
        "uniqueness_pct": _pct(limits.uniqueness_above),
        "strict": "true" if settings.data_validation_strict else "false",
        "field_count": field_count,
        "full_volume_rows": f"{FULL_VOLUME_ROWS:,}",
        "volume_examples": examples,
        "extra_rules_html": "\n    ".join(extra),
    }


@router.get("/wallets/{wallet}", response_class=HTMLResponse)
def wallet_page(
    wallet: str,
    db: Database = Depends(get_db),
    claimed: ClaimedReader = Depends(get_claimed_reader),
    store: ObjectStore = Depends(get_store),
    claims: ClaimsReader = Depends(get_claims_reader),
) -> HTMLResponse:
    """A wallet's earnings, what the last epoch settled, what it claimed and can claim, and the
    claims made (the chain's `Claimed` events, with their transactions)."""
    try:
        rewards = wallet_rewards(db, wallet)
    except InvalidInput as exc:
        return _page("not_found.html", status_code=400, message=exc.detail)
    settled = wallet_settlement(db, store, wallet, claimed)
    status = wallet_status(db, wallet)
    row = _template("wallet_entry.html")
    entries = [
        row.substitute(
            when=html.escape(entry["createdAt"] or ""),
            model=entry["modelId"],
            version=html.escape(entry["datasetVersion"] or ""),
            tokens=html.escape(f"{entry['tokens']:g}"),
        )
        for entry in rewards["entries"]
    ]
    claimable = settled["claimableAmount"]
    claim_html = (
        f'<a href="/api/claims/{html.escape(rewards["wallet"])}">Claim data (amount and proof)</a>'
        if claimable not in (None, "0")
        else "Nothing to claim now."
    )
    return _page(
        "wallet.html",
        wallet=rewards["wallet"],
        verified="Verified by signature" if status["verified"] else "Not verified",
        earned=f"{rewards['totalTokens']:g}",
        earned_units=rewards["totalAmount"],
        settled=settled["settledAmount"],
        claimed=settled["claimedAmount"] or "unknown (the chain does not answer)",
        claimable=claimable or "unknown",
        claim_html=claim_html,
        entries_html="\n".join(entries),
        claims_html=_claims_html(db, rewards["wallet"], claims),
    )


def _claims_html(db: Database, wallet: str, claims: ClaimsReader) -> str:
    row = last_settled(db)
    made = [] if row is None else claims(row.distributor_address, wallet)
    if made is None:
        return '<p id="claims">Unknown: the chain does not answer.</p>'
    if not made:
        return '<p id="claims">No claims yet.</p>'
    template = _template("wallet_claim.html")
    rows = [
        template.substitute(
            block=claim["block"],
            amount=html.escape(claim["amount"]),
            transaction=html.escape(claim["transaction"]),
        )
        for claim in made
    ]
    return (
        '<table class="entries" id="claims">\n<thead><tr><th>Block</th><th>Amount (base '
        "units)</th><th>Transaction</th></tr></thead>\n<tbody>\n"
        + "\n".join(rows)
        + "\n</tbody>\n</table>"
    )


@router.get("/static/{path:path}")
def static_file(path: str) -> Response:
    media_type = STATIC_FILES.get(path)
    if media_type is None:
        return Response("not found", status_code=404, media_type="text/plain")
    return FileResponse(
        STATIC_DIR / path,
        media_type=media_type,
        headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"},
    )
