"""The manifest that pays a contribution, wherever it is stored (spec §2.5): the one stored with
its dataset version, else the `manifest.json` beside the version's data, else the submitter's
stored one. Read by the payout (`pipeline.rewards.payouts`) and by the newcomer budget's
supplier list (`pipeline.rewards.budget`), so both name the same wallets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.core.errors import InvalidInput
from pipeline.core.tables import Contribution, ContributorProfile, DatasetVersion
from pipeline.rewards.manifests import (
    MANIFEST_FILENAME,
    InvalidManifest,
    parse_manifest,
    read_version_manifest,
)

if TYPE_CHECKING:
    from pipeline.services import Services


def resolve_manifest(svc: Services, job: Contribution, dv: DatasetVersion) -> tuple[Any, str, str]:
    """(manifest, source, problem): the version's own manifest, else the submitter's stored one.

    A manifest stored with the version wins even when it is invalid (then nothing is paid, and
    the problem says why): paying the submitter's default wallet instead could pay the wrong
    party of a multi-contributor dataset.
    """
    data: dict[str, Any] | None = dv.manifest
    source = "dataset version"
    if data is None:
        source = MANIFEST_FILENAME
        try:
            data = read_version_manifest(svc.store, dv.model_id, dv.version)
        except InvalidManifest as exc:
            problems = "; ".join(str(problem) for problem in exc.problems)
            return None, source, f"the {source} manifest is invalid: {problems}"
    if data is None:
        with svc.db.session() as session:
            profile = session.get(ContributorProfile, job.submitter_id)
            data = profile.manifest if profile else None
        source = "contributor profile"
    if data is None:
        return (
            None,
            "",
            (
                "no contributor manifest: none came with the contribution and the submitter "
                "has none stored (PUT /api/contributors/me)"
            ),
        )
    try:
        return parse_manifest(data), source, ""
    except InvalidInput as exc:
        return None, source, f"the {source} manifest is invalid: {exc.detail}"
