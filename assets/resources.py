"""The assets' one resource: settings, database and object store of the marketplace.

Every field left unset comes from the environment through `pipeline.core.config.Settings`, so the
production `Definitions` use `MarketplaceResource()` (see `resource_defs`); tests build one with
`MarketplaceResource.from_settings(settings)`. The parts are a `Services`
(`pipeline.services`). The database engine lives for the run's execution (its steps
share one process), and so does a `LeaseKeeper` renewing the claims of the run
(`pipeline.evaluation.leases`): when the process dies, the run's claims run out and the jobs are
given back. When the run ends, its claim of the model is released.

`run_batch` is how every step learns what it works on: the value its upstream step handed over
in this run, else the batch the database holds for this run (`claim_run_batch`, which first takes
the model's claim, waiting while another live run holds it; a re-execution takes over the jobs
its ended parent held).
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from assets.partitions import TAG_TRIGGER, parse_partition_key
from assets.run_values import IO_MANAGER, RunScopedIOManager
from assets.settings_resource import SettingsResource
from pipeline.core.config import Settings
from pipeline.evaluation.batches import Batch, StepResult
from pipeline.evaluation.claims import claim_run_batch
from pipeline.evaluation.leases import LeaseKeeper
from pipeline.evaluation.model_claims import EndedFn, release_model
from pipeline.services import Services

MARKETPLACE = "marketplace"

# How a finished Dagster run ended, in the words of the jobs' reasons.
_ENDED = {
    dg.DagsterRunStatus.CANCELED: "canceled",
    dg.DagsterRunStatus.FAILURE: "failed",
    dg.DagsterRunStatus.SUCCESS: "succeeded",
}


def run_ended(instance: dg.DagsterInstance) -> EndedFn:
    """Whether a claim holder (a run id) has ended, per the Dagster instance."""

    def ended(claim: str) -> str | None:
        run = instance.get_run_by_id(claim)
        return _ENDED.get(run.status) if run is not None else None

    return ended


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
        if self._services is not None and context.run_id:
            release_model(self._services.db, None, context.run_id)
        if self._services is not None:
            self._services.close()
            self._services = None

    @property
    def services(self) -> Services:
        if self._services is None:  # used outside a run (direct invocation in a test)
            self._services = Services(self.settings())
        return self._services

    def run_batch(
        self,
        context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext,
        upstream: StepResult | None,
        *,
        claim_new: bool = False,
    ) -> Batch:
        """What this step works on (see the module docstring); `claim_new` in the first step."""
        if upstream is not None:
            return upstream.batch
        run = context.op_execution_context.run
        model_id, version = parse_partition_key(run.tags["dagster/partition"])
        log = context.log

        def waiting(holder: str) -> None:
            log.warning(f"model {model_id} is held by run {holder}; waiting for it to end")

        return claim_run_batch(
            self.services,
            model_id,
            version,
            trigger=run.tags.get(TAG_TRIGGER),
            run_id=run.run_id,
            ended=run_ended(context.instance),
            parents=(run.parent_run_id,) if run.parent_run_id else (),
            claim_new=claim_new,
            on_wait=waiting,
        )


def resource_defs(settings: Settings | None = None) -> dict[str, Any]:
    """The resources by key: pinned to `settings` when given, else read from the environment;
    and the run-scoped IO manager (`assets.run_values`)."""
    marketplace = (
        MarketplaceResource() if settings is None else MarketplaceResource.from_settings(settings)
    )
    return {MARKETPLACE: marketplace, IO_MANAGER: RunScopedIOManager()}
