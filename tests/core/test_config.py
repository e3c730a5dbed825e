"""Settings (issue 2 §2): every spec §8 variable with its default; bad values name the variable."""

from __future__ import annotations

import pytest

from pipeline.core.config import ConfigError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [
        "ENABLE_EVALUATION_SCHEDULER", "SCHEDULER_POLL_INTERVAL_SECONDS",
        "SCHEDULER_MAX_CONCURRENT",
        "EVALUATION_DEBOUNCE_WINDOW_SECONDS", "DATASET_ARRIVAL_SQS_QUEUE_URL",
        "SERVICE_DATASET_BUCKET", "MAX_SAMPLE_SIZE", "PARALLEL_WORKERS", "BATCH_SIZE",
        "PIPELINE_LOG_LEVEL", "ENABLE_PII_DETECTION", "DATA_VALIDATION_STRICT", "DATABASE_URL",
        "ADMIN_USER_ID", "SERVICE_NAME", "TRUSTED_PROXIES",
    ]:  # fmt: skip
        monkeypatch.delenv(name, raising=False)


def test_spec_defaults() -> None:
    s = load_settings()
    assert s.enable_evaluation_scheduler is False
    assert s.scheduler_poll_interval_seconds == 60
    assert s.scheduler_max_concurrent == 5
    assert s.evaluation_debounce_window_seconds == 300
    assert s.dataset_arrival_sqs_queue_url is None
    assert s.service_dataset_bucket is None
    assert (s.max_sample_size, s.parallel_workers, s.batch_size) == (100_000, 8, 1000)
    assert s.pipeline_log_level == "INFO"
    assert s.enable_pii_detection is True
    assert s.data_validation_strict is False
    assert s.admin_user_id == "admin"
    assert s.service_name == "marketplace"
    assert s.session_cookie_name() == "marketplace_access_token"


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENABLE_EVALUATION_SCHEDULER", "true")
    monkeypatch.setenv("SCHEDULER_MAX_CONCURRENT", "2")
    monkeypatch.setenv("PIPELINE_LOG_LEVEL", "debug")
    monkeypatch.setenv("TRUSTED_PROXIES", "10.0.0.1, 10.0.0.2")
    s = load_settings()
    assert s.enable_evaluation_scheduler is True
    assert s.scheduler_max_concurrent == 2
    assert s.pipeline_log_level == "DEBUG"
    assert s.trusted_proxies == ["10.0.0.1", "10.0.0.2"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SCHEDULER_POLL_INTERVAL_SECONDS", "soon"),
        ("SCHEDULER_POLL_INTERVAL_SECONDS", "0"),
        ("ENABLE_PII_DETECTION", "maybe"),
        ("PIPELINE_LOG_LEVEL", "LOUD"),
        ("BATCH_SIZE", "-1"),
        ("SERVICE_NAME", "has space"),
    ],
)
def test_bad_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        load_settings()


def test_cli_refuses_to_start_on_bad_value(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from cli.main import main
    from pipeline.core.config import get_settings

    get_settings.cache_clear()
    monkeypatch.setenv("BATCH_SIZE", "lots")
    try:
        assert main(["db", "upgrade"]) == 2
    finally:
        get_settings.cache_clear()
    assert "BATCH_SIZE" in capsys.readouterr().err


def test_generated_jwt_secret_is_kept(tmp_path) -> None:
    s = load_settings(marketplace_data_dir=tmp_path)
    first = s.jwt_key()
    assert len(first) >= 32
    assert load_settings(marketplace_data_dir=tmp_path).jwt_key() == first
    assert (tmp_path / "jwt_secret").stat().st_mode & 0o077 == 0
