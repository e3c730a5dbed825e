"""The assets' one resource: settings, database and object store of the marketplace.

Every field left unset comes from the environment through `pipeline.config.Settings`, so the
production `Definitions` use `MarketplaceResource()` (see `resource_defs`); tests build one with
`MarketplaceResource.from_settings(settings)`. The database engine lives for one step.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from pipeline.config import Settings, load_settings
from pipeline.processing import Services

MARKETPLACE = "marketplace"

# Settings a deployment (or a test) may pin on the resource instead of the environment.
_OVERRIDES = (
    "database_url",
    "marketplace_data_dir",
    "service_dataset_bucket",
    "s3_endpoint_url",
    "aws_region",
    "max_sample_size",
    "parallel_workers",
    "batch_size",
    "pipeline_log_level",
    "enable_pii_detection",
    "data_validation_strict",
)


class MarketplaceResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Settings overrides for the pipeline (unset: from the environment, spec §8 defaults)."""

    database_url: str | None = None
    marketplace_data_dir: str | None = None
    service_dataset_bucket: str | None = None
    s3_endpoint_url: str | None = None
    aws_region: str | None = None
    max_sample_size: int | None = None
    parallel_workers: int | None = None
    batch_size: int | None = None
    pipeline_log_level: str | None = None
    enable_pii_detection: bool | None = None
    data_validation_strict: bool | None = None

    _services: Services | None = PrivateAttr(default=None)

    @classmethod
    def from_settings(cls, settings: Settings, **extra: Any) -> MarketplaceResource:
        values: dict[str, Any] = {name: getattr(settings, name) for name in _OVERRIDES}
        values["marketplace_data_dir"] = str(settings.marketplace_data_dir)
        values["database_url"] = settings.resolved_database_url
        values.update(extra)
        return cls(**values)

    def settings(self) -> Settings:
        overrides = {name: getattr(self, name) for name in _OVERRIDES}
        return load_settings(**{k: v for k, v in overrides.items() if v is not None})

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._services = Services(self.settings())

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
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
