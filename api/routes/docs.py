"""The API documentation pages, `/docs` (Swagger UI) and `/redoc` (ReDoc), served offline.

FastAPI's own pages load Swagger UI and ReDoc from a CDN, so they stay blank on a machine
without internet. These pages are FastAPI's (`get_swagger_ui_html`, `get_redoc_html`) pointed at
copies served by this service from the pinned `fastapi-offline` package, which ships the built
assets in its `static/` folder (fastapi-offline 1.7.7: swagger-ui-dist 5.32.6, redoc 2.5.3).
Only its own helper is not used: it builds the whole FastAPI app, and this one is ours.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import FileResponse, HTMLResponse, Response

router = APIRouter(include_in_schema=False)

ASSET_PREFIX = "/docs-assets"
ASSET_DIR = Path(str(files("fastapi_offline") / "static"))
# Only these files of the package are served.
ASSETS: dict[str, str] = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"

# Nothing on these pages may load from elsewhere: ReDoc 2.5.3 always shows Redocly's logo from
# cdn.redoc.ly, which this keeps the browser from asking for (the image hides itself when it
# fails). FastAPI's pages start Swagger UI with an inline script and style ReDoc's page inline,
# hence 'unsafe-inline'; ReDoc compiles JSON Schemas with Ajv, hence 'unsafe-eval'.
DOCS_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
        "connect-src 'self'; worker-src 'self' blob:; frame-ancestors 'none'; "
        "base-uri 'none'; object-src 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}


def _secured(response: HTMLResponse) -> HTMLResponse:
    response.headers.update(DOCS_SECURITY_HEADERS)
    return response


def _root(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _openapi_url(request: Request) -> str:
    return _root(request) + (request.app.openapi_url or "/openapi.json")


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    root = _root(request)
    page = get_swagger_ui_html(
        openapi_url=_openapi_url(request),
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{root}{ASSET_PREFIX}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSET_PREFIX}/swagger-ui.css",
        swagger_favicon_url=f"{root}{ASSET_PREFIX}/favicon.png",
        oauth2_redirect_url=root + OAUTH2_REDIRECT_URL,
        # Swagger UI would otherwise send the document's URL to validator.swagger.io for a badge
        # whenever the page is not served from localhost.
        swagger_ui_parameters={"validatorUrl": None},
    )
    return _secured(page)


@router.get(OAUTH2_REDIRECT_URL)
def swagger_ui_oauth2_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    root = _root(request)
    page = get_redoc_html(
        openapi_url=_openapi_url(request),
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}{ASSET_PREFIX}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{ASSET_PREFIX}/favicon.png",
        with_google_fonts=False,
    )
    return _secured(page)


@router.get(ASSET_PREFIX + "/{name}")
def docs_asset(name: str) -> Response:
    media_type = ASSETS.get(name)
    if media_type is None:
        return Response("not found", status_code=404, media_type="text/plain")
    return FileResponse(
        ASSET_DIR / name,
        media_type=media_type,
        headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"},
    )
