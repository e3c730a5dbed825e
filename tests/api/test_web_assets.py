"""Browser assets without a browser: vendored files match their documented digests, and the
API docs pages reference nothing but this service's own files.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest

from api.routes import docs, web

VENDOR_README = web.STATIC_DIR / "vendor" / "README.md"


@pytest.fixture
def backend() -> str:
    # Pages and files only; the stores are covered elsewhere.
    return "sqlite"


def test_vendored_files_match_the_digests_in_their_readme() -> None:
    documented = dict(
        re.findall(r"sha256 of `([^`]+)`: `([0-9a-f]{64})`", VENDOR_README.read_text())
    )
    vendored = sorted(
        path.removeprefix("vendor/") for path in web.STATIC_FILES if path.startswith("vendor/")
    )
    assert vendored == ["ajv2020.bundle.js", "papaparse.min.js"]
    for name in vendored:
        digest = hashlib.sha256((web.STATIC_DIR / "vendor" / name).read_bytes()).hexdigest()
        assert documented.get(name) == digest, name
    assert "==== papaparse 5.7.1 ====" in (web.STATIC_DIR / "vendor" / "LICENSES.txt").read_text()


def test_contribution_page_loads_the_csv_parser_from_this_service(client: Any) -> None:
    page = client.get("/models/1/contribute")
    assert page.status_code == 200
    scripts = re.findall(r'<script src="([^"]+)"', page.text)
    assert scripts == [
        "/static/vendor/ajv2020.bundle.js",
        "/static/rowcheck.js",
        "/static/vendor/papaparse.min.js",
        "/static/contribute.js",
    ]
    served = client.get("/static/vendor/papaparse.min.js")
    assert served.status_code == 200
    assert served.headers["content-type"].startswith("text/javascript")
    assert served.text.startswith("/* @license\nPapa Parse\nv5.7.1")


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_docs_pages_reference_only_this_service(client: Any, path: str) -> None:
    page = client.get(path)
    assert page.status_code == 200
    references = re.findall(r'(?:src|href|spec-url)="([^"]*)"', page.text)
    references += re.findall(r"url: '([^']*)'", page.text)
    assert references, "the page references its assets"
    assert all(ref.startswith("/") and not ref.startswith("//") for ref in references), references
    assert "cdn." not in page.text and "googleapis" not in page.text
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "img-src 'self' data:" in policy
    for ref in references:
        if ref.startswith(docs.ASSET_PREFIX):
            asset = client.get(ref)
            assert asset.status_code == 200, ref
            assert asset.content == (docs.ASSET_DIR / ref.rsplit("/", 1)[1]).read_bytes()


def test_docs_assets_come_from_the_pinned_package(client: Any) -> None:
    from importlib.metadata import version

    assert version("fastapi-offline") == "1.7.7"
    bundle = client.get(f"{docs.ASSET_PREFIX}/swagger-ui-bundle.js").text
    assert 'PACKAGE_VERSION:"5.32.6"' in bundle
    redoc = client.get(f"{docs.ASSET_PREFIX}/redoc.standalone.js").text
    assert '"2.5.3"' in redoc
    assert client.get(f"{docs.ASSET_PREFIX}/core.py").status_code == 404
    assert client.get(f"{docs.ASSET_PREFIX}/../core.py").status_code == 404
    assert client.get("/docs/oauth2-redirect").status_code == 200


def test_contribution_page_and_model_list_show_the_models_minimum_improvement(client: Any) -> None:
    page = client.get("/models/1/contribute")
    rule = re.search(r'<p id="minimum-rule">(.*?)</p>', page.text, re.S)
    assert rule is not None
    text = " ".join(re.sub(r"<[^>]+>", "", rule.group(1)).split())
    assert "this model's minimum of 0.5 %, at 97.5 % confidence for your first try" in text
    assert "(99.17 % for the second, and so on)" in text
    listed = {m["id"]: m for m in client.get("/api/models").json()}
    assert listed[1]["min_improvement_pct"] == 0.5
