"""The contribution web form (issue 6) in real headless Chromium against a live server.

Chromium is Debian's (`/usr/bin/chromium`, installed by `.ci/run`), driven by Playwright with
`executable_path`. Without it the tests skip, except with CI=true, where they fail.
"""

# ruff: noqa: F811 - the fixtures imported from tests.browser_support are parameters here

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select

from pipeline.db import Database
from pipeline.tables import Contribution, DatasetVersion
from tests.browser_support import (  # noqa: F401 - fixtures
    ARTIFACTS,
    backend,
    browser,
    live,
    page,
    tracked_page,
)

pytestmark = pytest.mark.slow


def _ready(page: Any) -> None:
    page.wait_for_selector("#app[data-ready=true]")


def _row(page: Any, index: int) -> Any:
    return page.locator(f'fieldset.row[data-row-index="{index}"]')


def _field(page: Any, index: int, name: str) -> Any:
    return _row(page, index).locator(f'.field[data-field="{name}"]')


def _fill_row(page: Any, index: int, values: dict[str, Any]) -> None:
    for name, value in values.items():
        control = _field(page, index, name).locator("[name]")
        if control.evaluate("el => el.tagName") == "SELECT":
            control.select_option(label=str(value))
        else:
            control.fill(str(value))


def _sign_in(page: Any, token: str) -> None:
    page.fill("#token-input", token)
    page.click("#token-form button[type=submit]")
    page.wait_for_selector("#signed-in:not([hidden])")
    _ready(page)


def _jobs(db: Database) -> list[Contribution]:
    with db.session() as session:
        return list(session.scalars(select(Contribution)))


def test_model_list_links_to_each_models_form(page: Any) -> None:
    page.goto("/")
    assert page.url.endswith("/models")
    link = page.locator('li.model[data-model-id="1"] a.contribute')
    assert "customer-churn" in page.inner_text("li.model[data-model-id='1'] h2")
    link.click()
    page.wait_for_url("**/models/1/contribute")
    _ready(page)
    # Rendered from the data-spec: enums as selects, bounds as min/max, required marks, help.
    tenure = _field(page, 0, "tenure_months")
    assert tenure.locator("input").get_attribute("type") == "number"
    assert tenure.locator("input").get_attribute("min") == "0"
    assert tenure.locator("input").get_attribute("max") == "120"
    assert tenure.locator(".req").count() == 1
    assert "Months the customer has been subscribed." in tenure.locator(".help").inner_text()
    options = _field(page, 0, "contract").locator("option").all_inner_texts()
    assert options[1:] == ["month-to-month", "one-year", "two-year"]
    assert _field(page, 0, "payment_method").locator(".req").count() == 0
    # No session cookie: a clear message and the token box.
    assert page.is_visible("#signed-out")
    assert "You are not signed in" in page.inner_text("#signed-out")
    assert "marketplace token --user" in page.inner_text("#signed-out")


def test_unknown_model_page_is_not_found(page: Any) -> None:
    response = page.goto("/models/999/contribute")
    assert response.status == 404
    assert "There is no model 999" in page.inner_text("main")


def test_form_validates_in_browser_shows_server_errors_and_follows_the_job(
    page: Any, session_token: Callable[..., str], db: Database
) -> None:
    posts: list[str] = []
    page.on(
        "request",
        lambda r: posts.append(r.url) if r.method == "POST" and "contributions" in r.url else None,
    )
    page.goto("/models/1/contribute")
    _ready(page)
    _sign_in(page, session_token("alice"))
    assert page.inner_text("#session-user") == "alice"

    # A value out of the data-spec's bounds is caught in the browser; nothing is sent.
    _fill_row(
        page,
        0,
        {
            "tenure_months": 500,
            "monthly_charges": 79.85,
            "contract": "one-year",
            "support_calls": 2,
            "churned": 1,
        },
    )
    page.click("#submit")
    assert _field(page, 0, "tenure_months").locator(".error").inner_text() == "must be <= 120"
    assert _field(page, 0, "tenure_months").locator("input").get_attribute("aria-invalid")
    assert "Nothing was sent" in page.inner_text("#form-summary")
    assert posts == []

    # Fixed; a second row; a wallet with a typo in the optional manifest is caught too.
    _fill_row(page, 0, {"tenure_months": 14})
    page.click("#add-row")
    _fill_row(
        page,
        1,
        {
            "tenure_months": 3,
            "monthly_charges": 20,
            "contract": "month-to-month",
            "payment_method": "card",
            "support_calls": 0,
            "has_fiber": "no (false)",
            "churned": 0,
        },
    )
    page.click("#manifest summary")
    page.fill("#m-contributor_id", "alice")
    page.fill("#m-wallet_address", "0x123")
    page.fill("#m-data_source", "CRM export")
    page.fill("#m-data_description", "Two accounts from the March billing run")
    page.fill("#m-license", "Proprietary")
    page.click("#submit")
    assert "0x followed by 40 hexadecimal" in page.inner_text("#m-wallet_address-error")
    assert _field(page, 0, "tenure_months").locator(".error").inner_text() == ""
    assert posts == []
    page.fill("#m-wallet_address", "0x52908400098527886E0F7030069857D2E4169EE7")
    assert page.inner_text("#m-wallet_address-error") == ""  # editing clears the error

    # The license identifier is checked by the server only; its error lands at the field.
    page.click("#submit")
    license_error = page.locator("#m-license-error")
    license_error.wait_for(state="visible")
    assert "unknown license identifier" in license_error.inner_text()
    assert len(posts) == 1
    assert _jobs(db) == []
    page.fill("#m-license", "CC-BY-4.0")

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "web-form.png"), full_page=True)

    # The server's §2.4 errors land at the row and field they name. The browser's check is
    # bypassed once by changing the request on its way out.
    def tamper(route: Any, request: Any) -> None:
        body = json.loads(request.post_data)
        body["rows"][1]["support_calls"] = 99
        route.continue_(post_data=json.dumps(body))

    page.route("**/api/models/1/contributions", tamper, times=1)
    page.click("#submit")
    server_error = _field(page, 1, "support_calls").locator(".error")
    server_error.wait_for(state="visible")
    assert "99 is greater than the maximum of 50" in server_error.inner_text()
    assert _field(page, 0, "support_calls").locator(".error").inner_text() == ""
    assert "1 of 2 rows failed validation" in page.inner_text("#form-summary")
    assert _jobs(db) == []

    # Sent as it is: accepted, and the job's status is shown and followed.
    page.click("#submit")
    job = page.locator("li.job").first
    job.wait_for(state="visible")
    job_id = job.get_attribute("data-job-id")
    assert job.locator(".job-id").inner_text() == job_id
    assert "2 rows accepted" in job.inner_text()
    page.wait_for_selector(f'li.job[data-job-id="{job_id}"][data-status="queued"]')
    assert len(posts) == 3

    [stored] = _jobs(db)
    assert stored.id == job_id
    assert stored.submitted_rows == 2
    assert stored.submitter_id == "alice"
    with db.session() as session:
        version = session.get(DatasetVersion, stored.dataset_version_id)
        assert version is not None
        assert version.manifest is not None
        assert version.manifest["wallet_address"] == "0x52908400098527886E0F7030069857D2E4169EE7"
    # The form starts over with one empty row for the next contribution.
    assert page.locator("fieldset.row").count() == 1
