"""The one settings object: every environment variable the service reads, with its default."""

from __future__ import annotations

import json
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

MB = 1024 * 1024


class ConfigError(RuntimeError):
    """A setting has a bad value; the message names the variable."""


class Settings(BaseSettings):
    """Names are the environment variable names (case-insensitive); spec §8 defaults."""

    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore")

    # Spec §8: scheduler, arrivals and storage.
    enable_evaluation_scheduler: bool = False
    scheduler_poll_interval_seconds: int = Field(default=60, ge=1)
    scheduler_max_concurrent: int = Field(default=5, ge=1)
    evaluation_debounce_window_seconds: int = Field(default=300, ge=0)
    # Not in the spec: how often the arrival sensor reads the queue (its Dagster interval).
    arrival_poll_interval_seconds: int = Field(default=30, ge=1)
    dataset_arrival_sqs_queue_url: str | None = None
    service_dataset_bucket: str | None = None

    # Dagster partitions of settled dataset versions (docs/scale.md).
    partition_keep_hours: int = Field(default=24, ge=0)
    partition_retire_per_tick: int = Field(default=500, ge=0)

    # Spec §8: pipeline settings.
    max_sample_size: int = Field(default=100_000, ge=1)
    parallel_workers: int = Field(default=8, ge=1)
    batch_size: int = Field(default=1000, ge=1)
    pipeline_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    enable_pii_detection: bool = True
    data_validation_strict: bool = False
    # How long a run's claim on a contribution job lasts unless renewed
    # (pipeline.evaluation.leases).
    claim_lease_seconds: int = Field(default=600, ge=1)

    # Valuation and payouts (docs/rewards.md).
    valuation_bootstrap_resamples: int = Field(default=1000, ge=20, le=100_000)
    valuation_confidence_level: float = Field(default=0.95, gt=0.5, lt=1.0)
    valuation_exact_max_players: int = Field(default=6, ge=1, le=10)
    valuation_shapley_budget: int = Field(default=128, ge=2, le=100_000)
    # Shares of larger batches (docs/valuation-scale.md): the model's estimator plays every
    # coalition while their training rows add up to at most this; beyond, on a keyed sample of
    # the accepted rows that fits it, of at least `valuation_sample_min_rows`; else the
    # surrogate game.
    valuation_coalition_row_budget: int = Field(default=200_000, ge=0)
    valuation_sample_min_rows: int = Field(default=20_000, ge=1)
    valuation_surrogate_max_base_rows: int = Field(default=20_000, ge=100)
    # A dask.distributed scheduler the fits run on; unset: this process. In production a
    # scheduler off this host must be tls:// with the client certificate below (mutual TLS).
    valuation_cluster_address: str | None = None
    valuation_cluster_tls_ca_file: Path | None = None
    valuation_cluster_tls_cert_file: Path | None = None
    valuation_cluster_tls_key_file: Path | None = None
    reward_max_tokens_per_contribution: float = Field(default=100.0, ge=0, allow_inf_nan=False)
    reward_max_tokens_per_model_per_day: float = Field(default=1000.0, ge=0, allow_inf_nan=False)
    # Each supplier's budget of false payouts over its tries on a model (pipeline.rewards.budget).
    reward_try_budget: float = Field(default=0.05, gt=0.0, lt=1.0)

    # Integrity of contributions (docs/integrity.md).
    integrity_copy_tolerance: float = Field(default=0.01, ge=0.0, le=1.0)
    integrity_min_novel_share: float = Field(default=0.05, ge=0.0, le=1.0)
    # Contributions of one supplier to one model found to contain benchmark rows in 24 hours
    # before the supplier must wait (429): bounds what probing the benchmark can learn.
    integrity_leak_verdicts_per_day: int = Field(default=3, ge=1, le=10_000)
    label_disagreement_margin: float = Field(default=0.10, gt=0.0, le=1.0)

    # The owner's training code, run in a sandbox (docs/sandbox.md).
    trainer_memory_mb: int = Field(default=4096, ge=64)
    trainer_cpu_seconds: int = Field(default=900, ge=1)
    trainer_wall_seconds: int = Field(default=1200, ge=1)
    trainer_file_size_mb: int = Field(default=1024, ge=1)
    # Processes and threads of one trainer run together (RLIMIT_NPROC in its user namespace).
    trainer_max_processes: int = Field(default=64, ge=8, le=4096)
    # Trainer runs at once in one valuation (each a process with its own memory limit).
    trainer_max_parallel: int = Field(default=1, ge=1, le=32)
    # Where each run gets its own cgroup holding its memory and process limits: auto (under
    # the service's own cgroup, v2 or v1, where it may make one), none (sampling and rlimits
    # only), or a cgroup v2 folder delegated to the service (docs/sandbox.md).
    trainer_cgroup_root: str = Field(default="auto", pattern=r"^(auto|none|/.+)$")
    # bwrap: namespaces (no network, nothing of the host but the Python install). none: limits
    # and an empty environment only, for a host without bubblewrap that is isolated otherwise;
    # owner code is refused unless it is set explicitly.
    trainer_isolation: Literal["bwrap", "none"] = "bwrap"
    # How the evaluation step starts the sandbox through Dagster Pipes: a local subprocess, or
    # a Kubernetes pod (dagster-k8s; docs/sandbox.md "Production").
    trainer_pipes_client: Literal["subprocess", "k8s"] = "subprocess"
    trainer_k8s_image: str | None = None
    trainer_k8s_namespace: str = "marketplace-trainers"
    # A ReadWriteMany volume claim mounted by the Dagster run worker and the trainer pods.
    trainer_k8s_volume_claim: str | None = None
    trainer_k8s_volume_mount: Path = Path("/var/lib/marketplace/trainer-runs")
    # Environments installed from model folders' requirements.txt (docs/sandbox.md,
    # "Requirements"): one environment's size, its install time, and all of them together.
    trainer_env_max_mb: int = Field(default=2048, ge=1)
    trainer_env_install_seconds: int = Field(default=600, ge=1)
    trainer_envs_max_total_mb: int = Field(default=20480, ge=1)

    # Settlement on an EVM chain (docs/settlement.md); off while SETTLEMENT_RPC_URL is unset.
    settlement_rpc_url: str | None = None
    # The RPC URL wallets are told to use for claims (GET /api/claims); unset: the one above.
    settlement_public_rpc_url: str | None = None
    settlement_chain_id: int | None = Field(default=None, ge=1)
    settlement_token_address: str | None = None
    settlement_distributor_address: str | None = None
    # The contracts' owner (mints, publishes roots): a secret, never logged nor stored.
    settlement_owner_key: SecretStr | None = None
    settlement_schedule: str = "0 0 * * 1"
    # Only wallets proven by signature (EIP-4361) enter an epoch; the others' amounts wait.
    settlement_require_verified_wallets: bool = False

    # Service wiring. development: what only `marketplace dev` may do (a plain tcp:// dask
    # scheduler off this host); `marketplace dev` sets it.
    marketplace_mode: Literal["production", "development"] = "production"
    database_url: str | None = None
    marketplace_data_dir: Path = Path(".marketplace")
    admin_token: SecretStr | None = None
    admin_user_id: str = "admin"
    service_name: str = Field(default="marketplace", pattern=r"^[A-Za-z0-9_.-]+$")
    jwt_secret: SecretStr | None = None
    jwt_ttl_seconds: int = Field(default=7 * 24 * 3600, ge=60)
    s3_endpoint_url: str | None = None
    aws_region: str = "us-east-1"
    redis_url: str | None = None
    trusted_proxies: Annotated[list[str], NoDecode] = Field(default_factory=list)
    dagster_pg_url: str | None = None
    # Host names the Dagster UI of `marketplace dev` answers besides loopback
    # (cli/webserver_guard.py).
    dagster_ui_allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    shutdown_grace_seconds: int = Field(default=20, ge=1)
    # Allocators of an API process (pipeline/core/process_memory.py); 0: glibc's default.
    malloc_arena_max: int = Field(default=2, ge=0, le=1024)
    malloc_mmap_threshold_bytes: int = Field(default=256 * 1024, ge=0, le=32 * MB)
    arrow_default_memory_pool: Literal["system", "jemalloc", "mimalloc"] = "system"

    # Request limits.
    contribution_max_body_bytes: int = Field(default=50 * MB, ge=1024)
    upload_max_bytes: int = Field(default=500 * MB, ge=1024)

    # Bounds the HTTP server enforces before the app sees a request (api/http_bounds.py).
    http_max_request_line_bytes: int = Field(default=8 * 1024, ge=256, le=1 * MB)
    http_max_header_bytes: int = Field(default=16 * 1024, ge=1024, le=1 * MB)
    http_max_headers: int = Field(default=100, ge=8, le=10_000)
    http_header_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    http_body_timeout_seconds: float = Field(default=20.0, gt=0, le=3600)
    http_body_min_bytes_per_second: int = Field(default=500, ge=0)
    http_keepalive_seconds: int = Field(default=5, ge=1, le=3600)
    http_max_connections: int = Field(default=1000, ge=1)

    @model_validator(mode="after")
    def _k8s_trainer_settings(self) -> Settings:
        if self.trainer_pipes_client == "k8s":
            missing = [
                name.upper()
                for name in ("trainer_k8s_image", "trainer_k8s_volume_claim")
                if not getattr(self, name)
            ]
            if missing:
                raise ValueError(f"TRAINER_PIPES_CLIENT=k8s needs {' and '.join(missing)}")
        return self

    @model_validator(mode="after")
    def _cluster_security(self) -> Settings:
        problem = cluster_address_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self

    @field_validator("pipeline_log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("trusted_proxies", "dagster_ui_allowed_hosts", mode="before")
    @classmethod
    def _split_proxies(cls, value: object) -> object:
        # Operators write "10.0.0.1,10.0.0.2" in env files rather than JSON lists.
        if isinstance(value, str):
            if value.strip().startswith("["):
                return json.loads(value)
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @property
    def data_dir(self) -> Path:
        return self.marketplace_data_dir.expanduser().resolve()

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'marketplace.db'}"

    @property
    def objects_dir(self) -> Path:
        return self.data_dir / "objects"

    @property
    def envs_dir(self) -> Path:
        return self.data_dir / "envs"

    @property
    def dagster_home(self) -> Path:
        return self.data_dir / "dagster"

    @property
    def uses_s3(self) -> bool:
        return bool(self.service_dataset_bucket)

    def session_cookie_name(self) -> str:
        return f"{self.service_name}_access_token"

    def jwt_key(self) -> str:
        """The signing secret: JWT_SECRET, else one generated once and kept in the data dir."""
        if self.jwt_secret is not None:
            return self.jwt_secret.get_secret_value()
        return _kept_jwt_key(self.data_dir / "jwt_secret")


LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def cluster_address_problem(settings: Settings) -> str | None:
    """Why VALUATION_CLUSTER_ADDRESS and its TLS files cannot be used, or None.

    A dask scheduler runs whatever its clients send, on itself and its workers, and hands out
    the data other clients scattered: off this host, only clients holding a certificate of the
    cluster's CA may reach it (tls://, mutual TLS), unless MARKETPLACE_MODE=development.
    """
    address = settings.valuation_cluster_address
    files = (settings.valuation_cluster_tls_ca_file, settings.valuation_cluster_tls_cert_file)
    if not address:
        return None
    scheme, _, rest = address.rpartition("://")
    host = urlsplit(f"//{rest}").hostname or ""
    if scheme == "tls":
        if not all(files):
            return (
                "VALUATION_CLUSTER_ADDRESS tls:// needs VALUATION_CLUSTER_TLS_CA_FILE and "
                "VALUATION_CLUSTER_TLS_CERT_FILE (the client certificate)"
            )
        return None
    if any(files):
        return (
            f"VALUATION_CLUSTER_TLS_* are set but VALUATION_CLUSTER_ADDRESS {address} is not tls://"
        )
    if host not in LOOPBACK and settings.marketplace_mode == "production":
        return (
            f"VALUATION_CLUSTER_ADDRESS {address} is a scheduler off this host without "
            "authentication: use tls:// with VALUATION_CLUSTER_TLS_* (docs/operations.md)"
        )
    return None


@lru_cache(maxsize=8)
def _kept_jwt_key(path: Path) -> str:
    """The generated signing secret, read once per process (the session cookie's check runs on
    the event loop: no file read per request)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(secrets.token_urlsafe(48))
        tmp.chmod(0o600)
        tmp.replace(path)
    return path.read_text().strip()


def load_settings(**overrides: object) -> Settings:
    """Build settings from the environment; a bad value raises ConfigError naming the variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = ".".join(str(part) for part in err["loc"]).upper()
            # A check of several settings (a model validator) names them in its message.
            message = err["msg"].removeprefix("Value error, ")
            problems.append(f"{name}: {message}" if name else message)
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
    except SettingsError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
