"""`/docs` and `/redoc` work offline: their assets come from the service, and they render.

In headless Chromium every request is routed through `tests.support.browser.Page`, which aborts
and records anything not for the live server's own origin: a page that still reached for a CDN
would show nothing here, as on a machine without internet, and fail the fixture's check.
"""

# ruff: noqa: F811 - the fixtures imported from tests.support.browser are parameters here

from __future__ import annotations

import pytest

from tests.support.browser import (  # noqa: F401 - fixtures
    ARTIFACTS,
    Page,
    backend,
    browser,
    tracked_page,
)

# One xdist worker runs the whole module, so Chromium (module fixture) starts once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("api-docs")]


def _own(page: Page, path: str) -> bool:
    return f"{page.origin}{path}" in page.requested


def test_swagger_ui_renders_the_operations_from_local_assets(tracked_page: Page) -> None:
    page = tracked_page.page
    page.goto("/docs")
    submit = page.locator(
        "#operations-contributions-post_contribution_api_models__modelId__contributions_post"
    )
    submit.wait_for(state="visible")
    assert "Submit contribution rows" in submit.inner_text()
    assert "/api/models/{modelId}/contributions" in submit.inner_text()
    assert page.locator(".opblock").count() >= 20
    # Opening an operation shows its parameters, read from /openapi.json.
    submit.locator(".opblock-summary").first.click()
    submit.locator(".parameters").wait_for(state="visible")
    assert "modelId" in submit.locator(".parameters").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "swagger-ui.png"))
    for path in (
        "/docs-assets/swagger-ui-bundle.js",
        "/docs-assets/swagger-ui.css",
        "/openapi.json",
    ):
        assert _own(tracked_page, path), path


def test_redoc_renders_the_operation_names_from_local_assets(tracked_page: Page) -> None:
    page = tracked_page.page
    page.goto("/redoc")
    operation = page.locator("h2", has_text="Submit contribution rows")
    operation.wait_for(state="visible")
    assert page.locator("h2").count() >= 20
    # The side menu lists each tag's operations by name.
    menu = page.locator("[role=menu]").first
    menu.get_by_text("contributions", exact=True).click()
    menu.get_by_text("Submit contribution rows").wait_for(state="visible")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "redoc.png"))
    # Redocly's logo is the one thing ReDoc asks for elsewhere; the page's CSP stops it in the
    # browser (the routing check would see it otherwise).
    assert all("Content Security Policy" in text for text in tracked_page.console_errors)
    assert _own(tracked_page, "/docs-assets/redoc.standalone.js")
    assert _own(tracked_page, "/openapi.json")
