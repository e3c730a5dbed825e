"""The contribution web form (issues 6 and 11) in real headless Chromium against a live server.

Chromium is Debian's (`/usr/bin/chromium`, installed by `.ci/run`), driven by Playwright with
`executable_path` (fixtures in tests/support/browser.py). Without it the tests skip, except with
CI=true, where they fail. Every request of the page must stay on the server's own origin.
"""

# ruff: noqa: F811 - the fixtures imported from tests.support.browser are parameters here

from __future__ import annotations

import html
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from sqlalchemy import select

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import Contribution, DatasetVersion
from pipeline.demo.churn_data import churn_rows
from pipeline.store.objectstore import object_store_from_settings
from tests.support.browser import (  # noqa: F401 - fixtures
    ARTIFACTS,
    backend,
    browser,
    page,
    tracked_page,
)
from tests.support.pipeline import WALLET_A, add_benchmark, run_pipeline, services

# One xdist worker runs the whole module, so Chromium (module fixture) starts once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("web-form")]


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


def _typed(page: Any) -> None:
    page.check("input[name=source][value=typed]")
    page.wait_for_selector("#typed-panel:not([hidden])")


def _csv(rows: list[dict[str, Any]]) -> str:
    # What a spreadsheet or pandas writes: booleans as True/False, every column present.
    return pd.DataFrame(rows).to_csv(index=False)


def _posts(page: Any) -> list[str]:
    posts: list[str] = []
    page.on(
        "request",
        lambda r: posts.append(r.url) if r.method == "POST" and "contributions" in r.url else None,
    )
    return posts


def _listed(page: Any) -> dict[str, str]:
    """The failing rows the page lists: row number -> text."""
    items = page.locator("#csv-errors li")
    return {
        items.nth(i).get_attribute("data-row"): items.nth(i).inner_text()
        for i in range(items.count())
    }


def _verdicts(page: Any) -> dict[str, str]:
    rows = page.locator("#precheck-rows tr")
    return {
        rows.nth(i).get_attribute("data-check"): rows.nth(i).get_attribute("data-verdict")
        for i in range(rows.count())
    }


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
    # Rows come from a CSV unless the person chooses to type them.
    assert page.is_visible("#csv-panel")
    assert page.is_hidden("#typed-panel")
    assert page.inner_text("#csv-columns") == (
        "tenure_months,monthly_charges,contract,payment_method,support_calls,has_fiber,churned"
    )
    _typed(page)
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


def test_thresholds_and_reward_rule_are_shown_before_submitting(page: Any) -> None:
    page.goto("/models/1/contribute")
    _ready(page)
    # Before any row: the §8 thresholds of pipeline.checks.quality and the reward rule.
    rules = page.locator("#rules")
    assert rules.is_visible()
    text = " ".join(rules.inner_text().split())
    assert "at least 100 rows" in text
    assert "completeness above 95 %" in text
    assert "uniqueness above 80 %" in text
    assert "100 % schema compliance" in text
    assert "rows × the 7 fields of the data-spec" in text
    assert "no personal data" in text
    reward = " ".join(page.inner_text("#reward-rule").split())
    assert "1 token per 1 % improvement" in reward
    assert "100 rows × 0.5, 1,000 rows × 0.75, 10,000 rows × 1" in reward
    assert "any failed check, earns 0 tokens" in reward
    minimum = " ".join(page.inner_text("#minimum-rule").split())
    assert "this model's minimum of 0.5 %, at 97.5 % confidence for your first try" in minimum
    # The page's script measures rows with the same figures.
    app = page.locator("#app")
    assert app.get_attribute("data-min-rows") == "100"
    assert app.get_attribute("data-completeness-above") == "0.95"
    assert app.get_attribute("data-uniqueness-above") == "0.8"


def test_typed_rows_are_checked_in_the_browser_and_too_few_are_not_sent(
    page: Any, session_token: Callable[..., str], db: Database
) -> None:
    posts = _posts(page)
    page.goto("/models/1/contribute")
    _ready(page)
    _sign_in(page, session_token("alice"))
    assert page.inner_text("#session-user") == "alice"
    _typed(page)

    # A value out of the data-spec's bounds is caught in the browser; nothing is sent.
    _fill_row(
        page,
        0,
        {
            "tenure_months": 500,
            "monthly_charges": 79.85,
            "contract": "one-year",
            "payment_method": "card",
            "support_calls": 2,
            "has_fiber": "yes (true)",
            "churned": 1,
        },
    )
    page.click("#submit")
    assert _field(page, 0, "tenure_months").locator(".error").inner_text() == "must be <= 120"
    assert _field(page, 0, "tenure_months").locator("input").get_attribute("aria-invalid")
    assert "Nothing was sent" in page.inner_text("#form-summary")
    assert _verdicts(page)["schema_compliance"] == "rejected"
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
    page.fill("#m-license", "CC-BY-4.0")
    page.click("#submit")
    assert "0x followed by 40 hexadecimal" in page.inner_text("#m-wallet_address-error")
    assert _field(page, 0, "tenure_months").locator(".error").inner_text() == ""
    assert posts == []
    page.fill("#m-wallet_address", WALLET_A)
    assert page.inner_text("#m-wallet_address-error") == ""  # editing clears the error

    # Two valid rows: the pipeline would reject them for their count, so they are not sent
    # (before issue 11 they were "accepted" and rejected minutes later).
    page.click("#submit")
    summary = page.inner_text("#form-summary")
    assert "Nothing was sent: the pipeline would reject these rows" in summary
    assert "2 rows (at least 100 required)" in summary
    verdicts = _verdicts(page)
    assert verdicts["row_count"] == "rejected"
    assert verdicts["schema_compliance"] == "passes"
    assert verdicts["uniqueness"] == "passes"
    assert page.inner_text('#precheck-rows tr[data-check="row_count"] .figure') == "2"
    assert posts == []
    assert _jobs(db) == []


def test_csv_with_bad_rows_lists_every_failing_row_and_sends_nothing(
    page: Any, session_token: Callable[..., str], db: Database
) -> None:
    posts = _posts(page)
    page.goto("/models/1/contribute")
    _ready(page)
    _sign_in(page, session_token("alice"))

    rows = churn_rows(150, seed=3)
    text = _csv(rows).splitlines()
    # Data row N is on line N + 1 (the header is line 1).
    text[3] = text[3].replace(text[3].split(",")[0], "500", 1)  # row 3: tenure above 120
    text[7] = ",".join([*text[7].split(",")[:-1], ""])  # row 7: churned missing
    fields = text[9].split(",")
    fields[2] = "weekly"  # row 9: not a contract term
    fields[1] = "cheap"  # row 9: not a number either
    text[9] = ",".join(fields)
    text[40] = text[40] + ",extra"  # row 40: one value too many
    text[120] = text[120].replace("True", "maybe").replace("False", "maybe")  # row 120
    page.fill("#csv-text", "\n".join(text) + "\n")
    page.click("#csv-check")

    report = page.locator("#csv-report")
    report.wait_for(state="visible")
    assert "5 of 150 rows in the pasted text do not match the data-spec" in report.inner_text()
    listed = _listed(page)
    assert sorted(listed, key=int) == ["3", "7", "9", "40", "120"]
    assert listed["3"] == "Row 3 (line 4): tenure_months: must be <= 120"
    assert listed["7"] == "Row 7 (line 8): churned: is required"
    assert "monthly_charges: must be a number" in listed["9"]
    assert "contract: must be equal to one of the allowed values" in listed["9"]
    assert "has 8 values, the header names 7 columns" in listed["40"]
    assert "has_fiber: must be true or false" in listed["120"]
    assert _verdicts(page)["schema_compliance"] == "rejected"

    page.click("#submit")
    assert "Nothing was sent: the CSV needs fixing" in page.inner_text("#form-summary")
    assert len(_listed(page)) == 5
    assert posts == []

    # A header that names no data-spec field is refused as a whole.
    page.fill("#csv-text", "tenure,monthly_charges\n1,2\n")
    page.click("#csv-check")
    assert "header line of the pasted text needs fixing" in report.inner_text()
    errors = page.inner_text("#csv-errors")
    assert "column “tenure” is not a field of the data-spec" in errors
    assert "required column “churned” is missing" in errors

    # Valid rows that the §8 checks would reject: too few distinct rows, and the optional
    # columns left out (completeness counts every field of the data-spec).
    copies = churn_rows(60, seed=4) * 2
    page.fill("#csv-text", _csv(copies))
    page.click("#csv-check")
    assert "120 rows read from the pasted text" in report.inner_text()
    assert _verdicts(page)["uniqueness"] == "rejected"
    assert page.inner_text('#precheck-rows tr[data-check="uniqueness"] .figure') == "50.0 %"
    page.click("#submit")
    assert "unique rows 50.0 % (above 80.0 % required)" in page.inner_text("#form-summary")

    narrow = [
        {k: v for k, v in row.items() if k not in ("has_fiber", "payment_method")}
        for row in churn_rows(120, seed=6)
    ]
    page.fill("#csv-text", _csv(narrow))
    page.click("#submit")
    assert "completeness 71.4 % (above 95.0 % required)" in page.inner_text("#form-summary")
    assert _verdicts(page)["column_completeness"] == "warning"
    assert posts == []
    assert _jobs(db) == []


def test_csv_file_is_submitted_and_followed_to_its_final_status(
    page: Any,
    session_token: Callable[..., str],
    db: Database,
    settings: Settings,
    tmp_path: Path,
) -> None:
    store = object_store_from_settings(settings)
    add_benchmark(db, store)
    posts = _posts(page)
    page.goto("/models/1/contribute")
    _ready(page)
    _sign_in(page, session_token("alice"))

    upload = tmp_path / "churn-march.csv"
    upload.write_text(_csv(churn_rows(200, seed=5)))
    page.set_input_files("#csv-file", str(upload))
    report = page.locator("#csv-report[data-state=ok]")
    report.wait_for(state="visible")
    assert "200 rows read from churn-march.csv; every row matches the data-spec" in (
        report.inner_text()
    )
    assert set(_verdicts(page).values()) == {"passes"}

    # The license identifier is checked by the server only; its error lands at the field.
    page.click("#manifest summary")
    page.fill("#m-contributor_id", "alice")
    page.fill("#m-wallet_address", WALLET_A)
    page.fill("#m-data_source", "CRM export")
    page.fill("#m-data_description", "Accounts from the March billing run")
    page.fill("#m-license", "Proprietary")
    page.click("#submit")
    license_error = page.locator("#m-license-error")
    license_error.wait_for(state="visible")
    assert "unknown license identifier" in license_error.inner_text()
    assert len(posts) == 1
    assert _jobs(db) == []
    page.fill("#m-license", "CC-BY-4.0")

    # The server's §2.4 errors are listed with the CSV row they name. The browser's check is
    # bypassed once by changing the request on its way out.
    def tamper(route: Any, request: Any) -> None:
        body = json.loads(request.post_data)
        body["rows"][3]["support_calls"] = 99
        route.continue_(post_data=json.dumps(body))

    page.route("**/api/models/1/contributions", tamper, times=1)
    page.click("#submit")
    page.locator("#csv-errors li").first.wait_for(state="visible")
    assert _listed(page) == {
        "4": "Row 4 (line 5): support_calls: 99 is greater than the maximum of 50"
    }
    assert "Nothing was stored" in page.inner_text("#form-summary")
    assert _jobs(db) == []

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "web-form.png"), full_page=True)

    # Sent as it is: submitted (not "accepted": the pipeline has not judged it yet), and the
    # job is followed on the page.
    page.click("#submit")
    item = page.locator("li.job").first
    item.wait_for(state="visible")
    job_id = item.get_attribute("data-job-id")
    assert item.locator(".job-id").inner_text() == job_id
    assert "200 rows submitted" in item.inner_text()
    assert "accepted" not in item.inner_text()
    page.wait_for_selector(f'li.job[data-job-id="{job_id}"][data-status="queued"]')
    assert len(posts) == 3
    # The form starts over for the next contribution.
    assert page.is_hidden("#csv-report")
    assert page.input_value("#csv-text") == ""

    [stored] = _jobs(db)
    assert stored.id == job_id
    assert stored.submitted_rows == 200
    assert stored.submitter_id == "alice"
    with db.session() as session:
        version = session.get(DatasetVersion, stored.dataset_version_id)
        assert version is not None
        assert version.manifest is not None
        assert version.manifest["wallet_address"] == WALLET_A
        version_key = version.version

    # The pipeline judges it; the page follows the job to its final status and reason.
    run_pipeline(services(settings, db, store), version_key)
    final = page.locator(f'li.job[data-job-id="{job_id}"][data-status="rewarded"]')
    final.wait_for(state="visible")
    detail = final.locator(".job-detail").inner_text()
    assert "rewarded" in detail
    assert "reward tokens" in detail
    assert final.locator(".job-status").inner_text() == "rewarded"
    page.screenshot(path=str(ARTIFACTS / "web-form-rewarded.png"), full_page=True)


def test_a_queued_job_shows_what_it_waits_for_and_is_followed_until_the_session_ends(
    page: Any, session_token: Callable[..., str], db: Database
) -> None:
    page.goto("/models/1/contribute")
    _ready(page)
    _sign_in(page, session_token("alice"))
    page.fill("#csv-text", _csv(churn_rows(120, seed=8)))
    page.click("#submit")
    item = page.locator("li.job[data-status=queued]")
    item.wait_for(state="visible")
    assert "120 rows submitted" in item.inner_text()
    [stored] = _jobs(db)
    assert stored.status == "queued"
    # The page says what the job view says the job waits for (the reason moves on with time).
    deadline = time.monotonic() + 20
    while True:
        view = page.request.get(f"/api/models/1/contributions/{stored.id}").json()
        shown = item.locator(".job-detail").inner_text()
        if view["reason"] and shown.startswith(view["reason"]):
            break
        assert time.monotonic() < deadline, f"page shows {shown!r}, the job view {view!r}"
        time.sleep(0.2)

    # A queued job's view may say when its evaluation is due (issue 11); the page shows it.
    # Added to the real answer here, as the view of this branch does not carry it yet.
    def due(route: Any, request: Any) -> None:
        response = route.fetch()
        route.fulfill(
            response=response, json={**response.json(), "evaluationDueAt": "2030-01-01T12:00:00Z"}
        )

    page.route("**/api/models/1/contributions/*", due)
    page.wait_for_function(
        "document.querySelector('li.job .job-detail').textContent"
        ".includes('evaluation expected to start at')"
    )
    page.unroute("**/api/models/1/contributions/*", due)

    page.context.clear_cookies()
    page.wait_for_function(
        "document.querySelector('li.job .job-detail').textContent.includes('HTTP 401')"
    )
    assert "sign in again" in item.locator(".job-detail").inner_text()


# --- CSRF (issue 21 row 4) -------------------------------------------------------------------


@pytest.fixture
def attacker_site(live: str) -> Iterator[str]:
    """A page on another port of the same host (same site, other origin) whose no-JS form
    posts a contribution to the service as `text/plain`, in the victim's browser."""
    rows = json.dumps(churn_rows(120, seed=3))
    # text/plain forms send `name=value`: the name opens a JSON body, the value closes it.
    name = f'{{"modelId": 1, "benchmarkSpecId": null, "rows": {rows}, "pad": "'
    page = (
        "<!doctype html><title>win a prize</title>"
        f'<form id="f" method="POST" enctype="text/plain" '
        f'action="{live}/api/models/1/contributions">'
        f'<input type="hidden" name="{html.escape(name)}" value="&quot;}}">'
        '<button id="go" type="submit">claim</button></form>'
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_form_on_another_origin_cannot_contribute_with_the_session_cookie(
    browser: Any,
    live: str,
    attacker_site: str,
    session_token: Callable[..., str],
    db: Database,
) -> None:
    context = browser.new_context(base_url=live)
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        page.goto("/models/1/contribute")
        _ready(page)
        _sign_in(page, session_token("alice"))
        # The server set the cookie HttpOnly: the page's scripts cannot read it.
        assert "access_token" not in page.evaluate("document.cookie")
        [cookie] = context.cookies()
        assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"

        answers: list[int] = []
        page.on(
            "response",
            lambda r: answers.append(r.status) if r.url.endswith("/contributions") else None,
        )
        page.goto(attacker_site)
        page.click("#go")
        page.wait_for_url(f"{live}/api/models/1/contributions")
        assert answers == [403]
        assert "another origin" in page.inner_text("body")
        assert _jobs(db) == []

        # The service's own form, in the same browser, still submits.
        page.goto(f"{live}/models/1/contribute")
        _ready(page)
        page.fill("#csv-text", _csv(churn_rows(120, seed=8)))
        page.click("#submit")
        page.locator("li.job[data-status=queued]").wait_for(state="visible")
        assert [job.submitter_id for job in _jobs(db)] == ["alice"]
    finally:
        context.close()
