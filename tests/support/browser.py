"""Headless Chromium for the browser tests: Debian's `/usr/bin/chromium` driven by Playwright.

Test modules import the fixtures (`browser`, `live`, `page`) from here. Without Chromium or
Playwright the tests skip, except with CI=true, where they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import IN_CI

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
# What works for headless Chromium on these machines (no network beyond loopback, root).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
TIMEOUT_MS = 15_000


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: the browser test must run; .ci/run installs chromium)")
    pytest.skip(reason)


@pytest.fixture
def backend() -> str:
    # The pages are clients of the HTTP API; both stores are covered by the API's own tests.
    return "sqlite"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} is missing: apt-get install chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the Python package playwright is not installed")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Page:
    """A Playwright page plus every URL it asked for and the ones that left the live server."""

    def __init__(self, page: Any, origin: str) -> None:
        self.page = page
        self.origin = origin
        self.requested: list[str] = []
        self.foreign: list[str] = []
        self.console_errors: list[str] = []

    def on_route(self, route: Any, request: Any) -> None:
        # Requests for another origin are recorded and never reach the network.
        self.requested.append(request.url)
        parts = urlsplit(request.url)
        if f"{parts.scheme}://{parts.netloc}" == self.origin:
            route.continue_()
        else:
            self.foreign.append(request.url)
            route.abort()


@pytest.fixture
def tracked_page(browser: Any, live: str) -> Iterator[Page]:
    context = browser.new_context(base_url=live, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    tracked = Page(page, live)
    context.route("**/*", tracked.on_route)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda m: tracked.console_errors.append(m.text) if m.type == "error" else None,
    )
    yield tracked
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
    assert not tracked.foreign, f"requests left the service's origin: {tracked.foreign}"


@pytest.fixture
def page(tracked_page: Page) -> Any:
    return tracked_page.page
