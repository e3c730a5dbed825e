"""One place that maps domain exceptions and request errors to the documented JSON bodies."""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from pipeline.core.errors import (
    Conflict,
    DomainError,
    Forbidden,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    RowValidationFailed,
    Unauthenticated,
    Unprocessable,
)

log = logging.getLogger(__name__)

STATUS: dict[type[DomainError], int] = {
    InvalidInput: 400,
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    PayloadTooLarge: 413,
    Unprocessable: 422,
    RateLimited: 429,
}


# Connection-level database failures (server down or restarting, network cut, pool exhausted,
# SQLite busy past its timeout): transient, so 503 with Retry-After rather than 500.
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (
    OperationalError,
    InterfaceError,
    DisconnectionError,
    PoolTimeout,
)
DATABASE_RETRY_AFTER_SECONDS = 5
DATABASE_WARNING_INTERVAL_SECONDS = 10.0


class _Throttled:
    """Logs a warning at most once per interval, counting the ones it held back."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.last = -interval
        self.held_back = 0

    def warn(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self.last < self.interval:
            self.held_back += 1
            return
        self.last = now
        more = f" (and {self.held_back} more since the last warning)" if self.held_back else ""
        self.held_back = 0
        log.warning(message + more, *args)


def status_for(exc: DomainError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]  # type: ignore[index]
    return 400


def describe_validation_errors(errors: list[Any]) -> str:
    """A one-line message for request validation errors, e.g. 'body.name: String too long'."""
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    more = f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(parts) + more


def row_errors_from_request(errors: list[Any]) -> list[dict[str, Any]]:
    """Request validation errors as spec §2.4 entries; rowIndex -1 when no row is at fault."""
    entries = []
    for err in errors:
        loc = [p for p in err.get("loc", ()) if p != "body"]
        if err.get("type") == "json_invalid":
            entries.append({"path": "body", "message": "malformed JSON body", "rowIndex": -1})
            continue
        path = ""
        row_index = -1
        for i, part in enumerate(loc):
            if isinstance(part, int):
                path += f"[{part}]"
                if i == 1 and loc[0] == "rows":
                    row_index = part
            else:
                path += f".{part}" if path else str(part)
        entries.append(
            {
                "path": path or "body",
                "message": str(err.get("msg", "invalid")),
                "rowIndex": row_index,
            }
        )
    return entries


def row_failure_body(message: str, errors: list[dict[str, Any]]) -> dict[str, Any]:
    return {"ok": False, "status": 400, "message": message, "errors": errors}


class ContributionBodyInvalid(Exception):
    """Raised by the contribution route class so its request errors use the §2.4 body."""

    def __init__(self, errors: list[Any]) -> None:
        super().__init__("invalid contribution request")
        self.errors = errors


HTTP_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path.

    Starlette answers 405 from the first route whose path matches and names only that route's
    methods, while a path such as /api/v1/keys is served by one route per method. Each method
    is asked of the whole route table, through the routes' own `matches`.
    """
    return [
        method
        for method in HTTP_METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL
            for route in request.app.router.routes
        )
    ]


def install_error_handlers(app: FastAPI) -> None:
    database_warning = _Throttled(DATABASE_WARNING_INTERVAL_SECONDS)

    async def _database_unavailable(request: Request, exc: Exception) -> JSONResponse:
        # The DBAPI error's class only: SQLAlchemy's message carries the statement and values.
        cause = getattr(exc, "orig", None) or exc
        database_warning.warn(
            "database unavailable on %s %s: %s",
            request.method,
            request.url.path,
            type(cause).__name__,
        )
        return JSONResponse(
            {"detail": "the database is unavailable; retry shortly"},
            status_code=503,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)},
        )

    for error_class in DATABASE_UNAVAILABLE:
        app.add_exception_handler(error_class, _database_unavailable)

    @app.exception_handler(RowValidationFailed)
    async def _rows(_: Request, exc: RowValidationFailed) -> JSONResponse:
        return JSONResponse(row_failure_body(exc.detail, exc.errors), status_code=400)

    @app.exception_handler(ContributionBodyInvalid)
    async def _contribution_body(_: Request, exc: ContributionBodyInvalid) -> JSONResponse:
        body = row_failure_body("invalid contribution request", row_errors_from_request(exc.errors))
        return JSONResponse(body, status_code=400)

    @app.exception_handler(DomainError)
    async def _domain(_: Request, exc: DomainError) -> JSONResponse:
        headers = None
        if isinstance(exc, RateLimited) and exc.retry_after is not None:
            headers = {"Retry-After": str(exc.retry_after)}
        return JSONResponse({"detail": exc.detail}, status_code=status_for(exc), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            {"detail": describe_validation_errors(list(exc.errors()))}, status_code=400
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request))
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal server error"}, status_code=500)
