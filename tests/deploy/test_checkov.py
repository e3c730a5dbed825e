"""deploy/ passes checkov (issue 34, case 9): no failed check; each skipped one says why.

checkov is heavy and not a dependency of the project: `.ci/run` installs it into a virtualenv of
its own and names it in CHECKOV. Outside CI, without checkov, the test is skipped; under CI
(CI=true) a missing checkov fails it. The Helm framework needs the `helm` binary and a chart;
deploy/helm holds only values for Dagster's chart, so the Kubernetes and Dockerfile reports are
the ones that must be there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import pytest

from tests.conftest import IN_CI
from tests.deploy.support import DEPLOY

CHECKOV_VERSION = "3.3.30"
FRAMEWORKS = ("kubernetes", "dockerfile", "helm")


def checkov() -> str:
    found = os.environ.get("CHECKOV") or shutil.which("checkov")
    if found is None:
        if IN_CI:
            pytest.fail("checkov is not installed: .ci/run installs it and sets CHECKOV")
        pytest.skip("checkov is not installed (.ci/run installs it into a venv; set CHECKOV)")
    return found


def reports(executable: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [executable, "--directory", str(DEPLOY), "--framework", *FRAMEWORKS,
         "--skip-download", "--output", "json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr[-3000:]
    found = json.loads(done.stdout)
    return found if isinstance(found, list) else [found]


def test_checkov_finds_no_failed_check_in_deploy() -> None:
    executable = checkov()
    version = subprocess.run([executable, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == CHECKOV_VERSION
    by_type = {report["check_type"]: report for report in reports(executable)}
    assert {"kubernetes", "dockerfile"} <= set(by_type), sorted(by_type)
    failed = [
        f"{check['check_id']} {check['resource']} ({check['file_path']}): {check['check_name']}"
        for report in by_type.values()
        for check in report["results"]["failed_checks"]
    ]
    assert not failed, "\n".join(failed)
    for report in by_type.values():
        assert report["summary"]["parsing_errors"] == 0, report["check_type"]
        for check in report["results"]["skipped_checks"]:
            reason = check["check_result"].get("suppress_comment") or ""
            assert len(reason) > 40, f"{check['check_id']} skipped without a reason"
    # What the scanner looked at: the manifests' pods and the Dockerfile.
    assert by_type["kubernetes"]["summary"]["passed"] > 100
    assert by_type["dockerfile"]["summary"]["resource_count"] == 1
