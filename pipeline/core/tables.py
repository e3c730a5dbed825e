"""SQLAlchemy 2 mapped tables: the one schema shared by the API, the CLI and the Dagster code.

Alembic migrations in `pipeline/core/migrations` create exactly these tables; a test compares the
two.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from pipeline.core.table_base import (
    INT32_MAX as INT32_MAX,
)
from pipeline.core.table_base import (
    NAMING as NAMING,
)
from pipeline.core.table_base import (
    Base as Base,
)
from pipeline.core.table_base import (
    UTCDateTime as UTCDateTime,
)
from pipeline.core.table_base import (
    canonical_uuid as canonical_uuid,
)
from pipeline.core.table_base import (
    isoformat_utc as isoformat_utc,
)
from pipeline.core.table_base import (
    new_uuid as new_uuid,
)
from pipeline.core.table_base import (
    utcnow as utcnow,
)
from pipeline.core.token_units import TokenUnits


class Model(Base):
    """An AI model that accepts contributions; its data-spec is a JSON Schema (draft 2020-12)."""

    __tablename__ = "models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    task_type: Mapped[str] = mapped_column(String(20))  # classification | regression
    target_column: Mapped[str] = mapped_column(String(200))
    # Exactly one of a listed estimator and the owner's trainer ("module:function" of the
    # model's folder, stored by content hash: pipeline.sandbox.folders).
    estimator: Mapped[str | None] = mapped_column(String(100), nullable=True)
    trainer: Mapped[str | None] = mapped_column(String(200), nullable=True)
    trainer_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The owner's view of the trainer's last failure (reason and stderr tail); None after a
    # run that trained it without failing.
    trainer_failure: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The environment its folder's requirements.txt installed (pipeline.sandbox.envs): its
    # key, size in bytes and `name==version` packages; None for a folder without one.
    trainer_env: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    trainer_env_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    trainer_env_packages: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    # The whole recipe (estimator, parameters, preprocessing: pipeline.models.estimators.Recipe);
    # None for models registered before recipes, whose recipe is `estimator` alone, and for
    # models with the owner's trainer.
    recipe: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    data_spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    example_row: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Bumped whenever the data-spec changes, so compiled validators are cached per spec version.
    spec_version: Mapped[int] = mapped_column(Integer, default=1)
    # Last dataset version number handed out; versions are allocated by an atomic increment.
    last_version: Mapped[int] = mapped_column(Integer, default=0)
    # Who may change the model's ground truth (benchmark, schedule): one user or one
    # organization; neither means no key may (see docs/ownership.md).
    owner_user_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    owner_org_id: Mapped[str | None] = mapped_column(
        ForeignKey("organizations.id"), nullable=True, index=True
    )
    # A batch is paid only when its improvement's lower bound clears this, in percent
    # (docs/rewards.md).
    min_improvement_pct: Mapped[float] = mapped_column(Float, default=0.5, server_default="0.5")
    # Fits of each training frame in a valuation; the pool is measured on them all and its band is
    # shown (pipeline.models.paired_fits, pipeline.rewards.stability).
    paired_fits: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


# DatasetVersion.kind: rows contributed through the API, a model owner's benchmark upload, or an
# object dropped into the store directly (an arrival with no API request behind it).
CONTRIBUTION_VERSION = "contribution"
BENCHMARK_VERSION = "benchmark"
EXTERNAL_VERSION = "external"

# Contribution.status; `pipeline.evaluation.jobs` says how a job moves between them.
QUEUED = "queued"
VALIDATING = "validating"
EVALUATING = "evaluating"
REWARDED = "rewarded"
REJECTED = "rejected"
FAILED = "failed"
STATUSES = (QUEUED, VALIDATING, EVALUATING, REWARDED, REJECTED, FAILED)


class DatasetVersion(Base):
    """One immutable dataset under `datasets/{model_id}/{version}/` in the object store."""

    __tablename__ = "dataset_versions"
    __table_args__ = (
        UniqueConstraint("model_id", "version", name="uq_dataset_versions_model_version"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    version: Mapped[str] = mapped_column(String(40))
    version_number: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))  # *_VERSION above
    object_key: Mapped[str] = mapped_column(String(1024), unique=True)
    uri: Mapped[str] = mapped_column(String(2048))
    file_format: Mapped[str] = mapped_column(String(20))  # parquet | csv | json
    sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    size_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    row_count: Mapped[int | None] = mapped_column(Integer, nullable=True)
    columns: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    manifest: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Contribution(Base):
    """A contribution job: rows submitted by a supplier, followed through checks and rewards."""

    __tablename__ = "contributions"
    __table_args__ = (
        UniqueConstraint("submitter_id", "idempotency_key", name="uq_contributions_idempotency"),
        # Finding expired claims (status in validating/evaluating, lease in the past).
        Index("ix_contributions_lease", "status", "lease_expires_at"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_uuid)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    dataset_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("dataset_versions.id"), nullable=True, index=True
    )
    submitter_id: Mapped[str] = mapped_column(String(200), index=True)
    status: Mapped[str] = mapped_column(String(20), default=QUEUED)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    submitted_rows: Mapped[int] = mapped_column(Integer)
    benchmark_spec_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    schema_version: Mapped[str | None] = mapped_column(String(100), nullable=True)
    template_id: Mapped[str | None] = mapped_column(String(100), nullable=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    quality: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    improvement_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    tokens: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The claim of the run working on the job (validating, evaluating): who holds it and until
    # when; an expired lease means the run died (see pipeline.evaluation.leases,
    # docs/robustness.md).
    claimed_by: Mapped[str | None] = mapped_column(String(100), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(nullable=True)
    # Claims of this job whose lease expired; the second one fails the job.
    expired_claims: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Why the job's payout is held for the operator (the reference check of a valuation by the
    # owner's training code, pipeline.rewards.holds); None: not held. A held job is neither
    # paid nor accepted training data until the operator releases it.
    payout_hold: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class ModelClaim(Base):
    """The run working on a model's versions: one at a time (pipeline.evaluation.model_claims)."""

    __tablename__ = "model_claims"

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), primary_key=True)
    claimed_by: Mapped[str] = mapped_column(String(100))
    lease_expires_at: Mapped[datetime] = mapped_column()
    claimed_at: Mapped[datetime] = mapped_column(default=utcnow)


class BenchmarkSpec(Base):
    """How a model is scored: created by a benchmark upload, points at its dataset version."""

    __tablename__ = "benchmark_specs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_uuid)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    dataset_version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id"))
    filename: Mapped[str] = mapped_column(String(500))
    eval_split: Mapped[str] = mapped_column(String(100), default="test")
    metric_name: Mapped[str] = mapped_column(String(50), default="accuracy")
    metric_direction: Mapped[str] = mapped_column(String(20), default="higher_is_better")
    target_column: Mapped[str] = mapped_column(String(200), default="target")
    input_columns: Mapped[list[Any]] = mapped_column(JSON, default=list)
    row_count: Mapped[int] = mapped_column(Integer)
    columns: Mapped[list[Any]] = mapped_column(JSON, default=list)
    allow_pii: Mapped[bool] = mapped_column(Boolean, default=False)
    created_by: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class EvaluationSchedule(Base):
    """At most one cron schedule per model (spec §2.7)."""

    __tablename__ = "evaluation_schedules"
    __table_args__ = (Index("ix_evaluation_schedules_due", "enabled", "next_run_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_uuid)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), unique=True)
    cron_expression: Mapped[str] = mapped_column(String(200))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    last_run_at: Mapped[datetime | None] = mapped_column(nullable=True)
    next_run_at: Mapped[datetime | None] = mapped_column(nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class DatasetArrival(Base):
    """A dataset object seen arriving under `datasets/{model_id}/{version}/` (spec §6)."""

    __tablename__ = "dataset_arrivals"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_uuid)
    model_id: Mapped[int] = mapped_column(Integer, index=True)
    version: Mapped[str] = mapped_column(String(40))
    object_key: Mapped[str] = mapped_column(String(1024), unique=True)
    uri: Mapped[str] = mapped_column(String(2048))
    size_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    source: Mapped[str] = mapped_column(String(20))  # sqs | local
    # Null until an evaluation run is requested for the arrival; indexed for that lookup.
    run_key: Mapped[str | None] = mapped_column(String(300), nullable=True, index=True)
    received_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class ArrivalEvent(Base):
    """The embedded arrival queue: S3-notification-shaped messages written with the data."""

    __tablename__ = "arrival_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Evaluation(Base):
    """One scoring of a model on a benchmark, with and without a dataset version."""

    __tablename__ = "evaluations"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_uuid)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    dataset_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("dataset_versions.id"), nullable=True
    )
    benchmark_spec_id: Mapped[str] = mapped_column(ForeignKey("benchmark_specs.id"))
    trigger: Mapped[str] = mapped_column(String(20))  # arrival | schedule | manual
    metric_name: Mapped[str] = mapped_column(String(50))
    metric_direction: Mapped[str] = mapped_column(String(20))
    score: Mapped[float] = mapped_column(Float)
    baseline_score: Mapped[float | None] = mapped_column(Float, nullable=True)
    # A contribution's evaluation: its Shapley share of the batch's pool
    # (pipeline.rewards.valuation).
    improvement_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    run_id: Mapped[str | None] = mapped_column(String(100), nullable=True)
    # The contributions valued together share one valuation id; payment is per valuation.
    valuation_id: Mapped[str | None] = mapped_column(String(36), nullable=True, index=True)
    pool_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    interval_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    interval_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    interval_level: Mapped[float | None] = mapped_column(Float, nullable=True)
    resamples: Mapped[int | None] = mapped_column(Integer, nullable=True)
    batch_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    batch_rows: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Rows of the owner's base training data (the benchmark file's non-evaluation split) that
    # both the "with" and the "without" model were trained on.
    base_rows: Mapped[int | None] = mapped_column(Integer, nullable=True)
    valuation_method: Mapped[str | None] = mapped_column(String(20), nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RewardEntry(Base):
    """Ledger of reward tokens owed to a wallet for one evaluation; written once per evaluation."""

    __tablename__ = "reward_ledger"
    __table_args__ = (
        UniqueConstraint("evaluation_id", "wallet_address", name="uq_reward_ledger_eval_wallet"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    evaluation_id: Mapped[str] = mapped_column(ForeignKey("evaluations.id"))
    contribution_id: Mapped[str | None] = mapped_column(
        ForeignKey("contributions.id"), nullable=True
    )
    model_id: Mapped[int] = mapped_column(Integer)
    wallet_address: Mapped[str] = mapped_column(String(42), index=True)
    tokens: Mapped[float] = mapped_column(Float)
    # The exact amount in base units (10**-18 token); `tokens` is its float, kept for readers.
    units: Mapped[int] = mapped_column(TokenUnits())
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ValuationTry(Base):
    """One valuation decision on one contribution: a test in its supplier's budget of tries.

    `pipeline.rewards.budget` reads a supplier's earlier tries (linked by user and wallet, see
    `ValuationTryIdentity`) to set the level of the next one; `accepted` tries earn it back.
    """

    __tablename__ = "valuation_tries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    # The tries of one valuation are one test of its pool (per stream).
    valuation_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    contribution_id: Mapped[str] = mapped_column(ForeignKey("contributions.id"), unique=True)
    submitter_id: Mapped[str] = mapped_column(String(200))
    stream: Mapped[str] = mapped_column(String(20))  # own | newcomer
    try_number: Mapped[int] = mapped_column(Integer)  # since the stream's last accepted try
    level: Mapped[float] = mapped_column(Float)  # the test's false-pay probability
    bound_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    min_improvement_pct: Mapped[float] = mapped_column(Float)
    accepted: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ValuationTryIdentity(Base):
    """Who made a try: its submitter (`user:ID`) and each wallet it pays (`wallet:0x...`)."""

    __tablename__ = "valuation_try_identities"
    __table_args__ = (Index("ix_valuation_try_identities_lookup", "model_id", "identity"),)

    try_id: Mapped[int] = mapped_column(ForeignKey("valuation_tries.id"), primary_key=True)
    identity: Mapped[str] = mapped_column(String(250), primary_key=True)
    model_id: Mapped[int] = mapped_column(Integer)


class ContributorProfile(Base):
    """A supplier's stored contributor manifest (spec §2.5)."""

    __tablename__ = "contributor_profiles"

    user_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Organization(Base):
    __tablename__ = "organizations"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_uuid)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class OrgMember(Base):
    __tablename__ = "org_members"

    org_id: Mapped[str] = mapped_column(ForeignKey("organizations.id"), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    role: Mapped[str] = mapped_column(String(20))  # Owner | Admin | Developer | Viewer
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiKey(Base):
    """An API key; only the SHA-256 of the full value is stored, with a display prefix."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_uuid)
    name: Mapped[str] = mapped_column(String(100))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    key_prefix: Mapped[str] = mapped_column(String(40))
    user_id: Mapped[str] = mapped_column(String(200), index=True)
    org_id: Mapped[str | None] = mapped_column(
        ForeignKey("organizations.id"), nullable=True, index=True
    )
    service_id: Mapped[str] = mapped_column(String(20))
    scopes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    environment: Mapped[str] = mapped_column(String(20), default="production")
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    rate_limit_per_hour: Mapped[int] = mapped_column(Integer, default=1000)
    monthly_prediction_limit: Mapped[int | None] = mapped_column(Integer, nullable=True)
    allowed_ips: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    billing_plan: Mapped[str] = mapped_column(String(50), default="free")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(nullable=True)
    replaced_by: Mapped[str | None] = mapped_column(String(36), nullable=True)


class KeyUsage(Base):
    """Prediction count per key per calendar month, for monthly_prediction_limit."""

    __tablename__ = "key_usage"

    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id"), primary_key=True)
    month: Mapped[str] = mapped_column(String(7), primary_key=True)  # YYYY-MM
    count: Mapped[int] = mapped_column(Integer, default=0)


# The settlement tables share this schema (and `Base`); imported here so every user has them.
from pipeline.core import settlement_tables as _settlement_tables  # noqa: E402, F401
