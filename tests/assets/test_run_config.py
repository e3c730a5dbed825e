"""A run's config cannot change what the deployment decides (issue 34, case 2).

A run's config is whatever the caller of Dagster's GraphQL sends. The settings that decide
payment, isolation, storage and credentials come from the deployment only: a run config naming
one is refused at launch, before any step runs; the one run-configurable setting (the log
level) still works, over the settings pinned in code.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest

import definitions
from assets.partitions import EVALUATION_JOB
from assets.resources import MARKETPLACE, MarketplaceResource
from assets.settings_resource import RUN_CONFIGURABLE
from pipeline.core.config import Settings, load_settings
from sensors.resources import SENSOR_STORE

# Settings of each kind the issue names, with the value the probe sent.
DEPLOYMENT_ONLY = {
    "reward_max_tokens_per_contribution": 0.01,
    "reward_max_tokens_per_model_per_day": 1e9,
    "valuation_bootstrap_resamples": 20,
    "trainer_isolation": "none",
    "trainer_pipes_client": "subprocess",
    "trainer_memory_mb": 1_000_000,
    "database_url": "sqlite:////tmp/elsewhere.db",
    "marketplace_data_dir": "/tmp/elsewhere",
    "service_dataset_bucket": "attacker-bucket",
    "s3_endpoint_url": "http://attacker.example",
    "valuation_cluster_address": "tcp://attacker.example:8786",
    "enable_pii_detection": False,
}


def _resource_config(key: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"resources": {key: {"config": config}}}


@pytest.mark.parametrize("name", sorted(DEPLOYMENT_ONLY))
def test_a_run_config_setting_a_deployment_setting_is_refused_at_launch(name: str) -> None:
    job = definitions.defs().resolve_job_def(EVALUATION_JOB)
    config = _resource_config(MARKETPLACE, {name: DEPLOYMENT_ONLY[name]})
    with pytest.raises(dg.DagsterInvalidConfigError) as refused:
        dg.validate_run_config(job, config)
    assert f'unexpected config entry "{name}"' in str(refused.value)


def test_the_sensor_store_takes_no_settings_from_run_config() -> None:
    job = definitions.defs().resolve_job_def(EVALUATION_JOB)
    config = _resource_config(SENSOR_STORE, {"enable_evaluation_scheduler": True})
    with pytest.raises(dg.DagsterInvalidConfigError, match="enable_evaluation_scheduler"):
        dg.validate_run_config(job, config)


def test_only_the_log_level_is_run_configurable() -> None:
    assert set(RUN_CONFIGURABLE) == {"pipeline_log_level"}
    assert set(MarketplaceResource.model_fields) == {"pipeline_log_level"}


def test_a_run_sets_the_log_level_over_the_settings_pinned_in_code(settings: Settings) -> None:
    pinned = load_settings(**{**dict(settings), "reward_max_tokens_per_contribution": 3.5})
    seen: dict[str, Any] = {}

    @dg.asset
    def probe(marketplace: MarketplaceResource) -> None:
        run_settings = marketplace.settings()
        seen["level"] = run_settings.pipeline_log_level
        seen["cap"] = run_settings.reward_max_tokens_per_contribution
        seen["data_dir"] = run_settings.data_dir

    result = dg.materialize(
        [probe],
        resources={MARKETPLACE: MarketplaceResource.from_settings(pinned)},
        run_config=_resource_config(MARKETPLACE, {"pipeline_log_level": "DEBUG"}),
    )
    assert result.success
    assert seen == {"level": "DEBUG", "cap": 3.5, "data_dir": settings.data_dir}


def test_a_bad_run_config_log_level_is_refused_at_launch() -> None:
    job = definitions.defs().resolve_job_def(EVALUATION_JOB)
    config = _resource_config(MARKETPLACE, {"pipeline_log_level": "LOUD"})
    with pytest.raises(dg.DagsterInvalidConfigError, match="pipeline_log_level"):
        dg.validate_run_config(job, config)
