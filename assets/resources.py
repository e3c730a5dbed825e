"""The assets' one resource: settings, database and object store of the marketplace.

Every field left unset comes from the environment through `pipeline.core.config.Settings`, so the
production `Definitions` use `MarketplaceResource()` (see `resource_defs`); tests build one with
`MarketplaceResource.from_settings(settings)`. The parts come from the composition root
(`pipeline.bootstrap.Services`). The database engine lives for one step, and so
does a `LeaseKeeper` renewing the claims of the run (`pipeline.evaluation.leases`): when the step's
process dies, the run's claims run out and the jobs are given back.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from assets.settings_resource import SettingsResource
from pipeline.bootstrap import Services
from pipeline.core.config import Settings
from pipeline.evaluation.leases import LeaseKeeper

MARKETPLACE = "marketplace"


class MarketplaceResource(SettingsResource):
    """Settings, database and object store for the assets (see `SettingsResource`)."""

    _services: Services | None = PrivateAttr(default=None)
    _leases: LeaseKeeper | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        settings = self.settings()
        self._services = Services(settings)
        if context.run_id:
            # claim_batch claims jobs under the run id; renew them while this step runs.
            self._leases = LeaseKeeper(
                self._services.db, context.run_id, settings.claim_lease_seconds
            ).start()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._leases is not None:
            self._leases.stop()
            self._leases = None
        if self._services is not None:
            self._services.close()
            self._services = None

    @property
    def services(self) -> Services:
        if self._services is None:  # used outside a run (direct invocation in a test)
            self._services = Services(self.settings())
        return self._services


def resource_defs(settings: Settings | None = None) -> dict[str, Any]:
    """The resources by key: pinned to `settings` when given, else read from the environment."""
    if settings is None:
        return {MARKETPLACE: MarketplaceResource()}
    return {MARKETPLACE: MarketplaceResource.from_settings(settings)}
