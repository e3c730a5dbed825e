"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-23 00:39:07.983492
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "arrival_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_arrival_events")),
    )
    op.create_table(
        "contributor_profiles",
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("manifest", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_contributor_profiles")),
    )
    op.create_table(
        "dataset_arrivals",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(length=40), nullable=False),
        sa.Column("object_key", sa.String(length=1024), nullable=False),
        sa.Column("uri", sa.String(length=2048), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("source", sa.String(length=20), nullable=False),
        sa.Column("run_key", sa.String(length=300), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dataset_arrivals")),
        sa.UniqueConstraint("object_key", name=op.f("uq_dataset_arrivals_object_key")),
    )
    with op.batch_alter_table("dataset_arrivals", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_dataset_arrivals_model_id"), ["model_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_dataset_arrivals_received_at"), ["received_at"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_dataset_arrivals_run_key"), ["run_key"], unique=False)

    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("task_type", sa.String(length=20), nullable=False),
        sa.Column("target_column", sa.String(length=200), nullable=False),
        sa.Column("estimator", sa.String(length=100), nullable=False),
        sa.Column("data_spec", sa.JSON(), nullable=False),
        sa.Column("example_row", sa.JSON(), nullable=False),
        sa.Column("spec_version", sa.Integer(), nullable=False),
        sa.Column("last_version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
        sa.UniqueConstraint("name", name=op.f("uq_models_name")),
    )
    op.create_table(
        "organizations",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_organizations")),
        sa.UniqueConstraint("name", name=op.f("uq_organizations_name")),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("key_prefix", sa.String(length=40), nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("org_id", sa.String(length=36), nullable=True),
        sa.Column("service_id", sa.String(length=20), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("environment", sa.String(length=20), nullable=False),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("rate_limit_per_hour", sa.Integer(), nullable=False),
        sa.Column("monthly_prediction_limit", sa.Integer(), nullable=True),
        sa.Column("allowed_ips", sa.JSON(), nullable=True),
        sa.Column("billing_plan", sa.String(length=50), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("replaced_by", sa.String(length=36), nullable=True),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_api_keys_org_id_organizations")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_keys_org_id"), ["org_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_api_keys_user_id"), ["user_id"], unique=False)

    op.create_table(
        "dataset_versions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(length=40), nullable=False),
        sa.Column("version_number", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("object_key", sa.String(length=1024), nullable=False),
        sa.Column("uri", sa.String(length=2048), nullable=False),
        sa.Column("file_format", sa.String(length=20), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("size_bytes", sa.BigInteger(), nullable=True),
        sa.Column("row_count", sa.Integer(), nullable=True),
        sa.Column("columns", sa.JSON(), nullable=True),
        sa.Column("manifest", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"], ["models.id"], name=op.f("fk_dataset_versions_model_id_models")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dataset_versions")),
        sa.UniqueConstraint("model_id", "version", name="uq_dataset_versions_model_version"),
        sa.UniqueConstraint("object_key", name=op.f("uq_dataset_versions_object_key")),
    )
    with op.batch_alter_table("dataset_versions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_dataset_versions_model_id"), ["model_id"], unique=False
        )

    op.create_table(
        "evaluation_schedules",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("cron_expression", sa.String(length=200), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"], ["models.id"], name=op.f("fk_evaluation_schedules_model_id_models")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evaluation_schedules")),
        sa.UniqueConstraint("model_id", name=op.f("uq_evaluation_schedules_model_id")),
    )
    with op.batch_alter_table("evaluation_schedules", schema=None) as batch_op:
        batch_op.create_index(
            "ix_evaluation_schedules_due", ["enabled", "next_run_at"], unique=False
        )

    op.create_table(
        "org_members",
        sa.Column("org_id", sa.String(length=36), nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_org_members_org_id_organizations")
        ),
        sa.PrimaryKeyConstraint("org_id", "user_id", name=op.f("pk_org_members")),
    )
    op.create_table(
        "benchmark_specs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("dataset_version_id", sa.Integer(), nullable=False),
        sa.Column("filename", sa.String(length=500), nullable=False),
        sa.Column("eval_split", sa.String(length=100), nullable=False),
        sa.Column("metric_name", sa.String(length=50), nullable=False),
        sa.Column("metric_direction", sa.String(length=20), nullable=False),
        sa.Column("target_column", sa.String(length=200), nullable=False),
        sa.Column("input_columns", sa.JSON(), nullable=False),
        sa.Column("row_count", sa.Integer(), nullable=False),
        sa.Column("columns", sa.JSON(), nullable=False),
        sa.Column("allow_pii", sa.Boolean(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_version_id"],
            ["dataset_versions.id"],
            name=op.f("fk_benchmark_specs_dataset_version_id_dataset_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["model_id"], ["models.id"], name=op.f("fk_benchmark_specs_model_id_models")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_benchmark_specs")),
    )
    with op.batch_alter_table("benchmark_specs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_benchmark_specs_model_id"), ["model_id"], unique=False)

    op.create_table(
        "contributions",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("dataset_version_id", sa.Integer(), nullable=True),
        sa.Column("submitter_id", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("submitted_rows", sa.Integer(), nullable=False),
        sa.Column("benchmark_spec_id", sa.String(length=36), nullable=True),
        sa.Column("schema_version", sa.String(length=100), nullable=True),
        sa.Column("template_id", sa.String(length=100), nullable=True),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("quality", sa.JSON(), nullable=True),
        sa.Column("improvement_pct", sa.Float(), nullable=True),
        sa.Column("tokens", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_version_id"],
            ["dataset_versions.id"],
            name=op.f("fk_contributions_dataset_version_id_dataset_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["model_id"], ["models.id"], name=op.f("fk_contributions_model_id_models")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_contributions")),
        sa.UniqueConstraint("submitter_id", "idempotency_key", name="uq_contributions_idempotency"),
    )
    with op.batch_alter_table("contributions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_contributions_dataset_version_id"), ["dataset_version_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_contributions_model_id"), ["model_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_contributions_submitter_id"), ["submitter_id"], unique=False
        )

    op.create_table(
        "key_usage",
        sa.Column("key_id", sa.String(length=36), nullable=False),
        sa.Column("month", sa.String(length=7), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["key_id"], ["api_keys.id"], name=op.f("fk_key_usage_key_id_api_keys")
        ),
        sa.PrimaryKeyConstraint("key_id", "month", name=op.f("pk_key_usage")),
    )
    op.create_table(
        "evaluations",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("dataset_version_id", sa.Integer(), nullable=True),
        sa.Column("benchmark_spec_id", sa.String(length=36), nullable=False),
        sa.Column("trigger", sa.String(length=20), nullable=False),
        sa.Column("metric_name", sa.String(length=50), nullable=False),
        sa.Column("metric_direction", sa.String(length=20), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("baseline_score", sa.Float(), nullable=True),
        sa.Column("improvement_pct", sa.Float(), nullable=True),
        sa.Column("run_id", sa.String(length=100), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["benchmark_spec_id"],
            ["benchmark_specs.id"],
            name=op.f("fk_evaluations_benchmark_spec_id_benchmark_specs"),
        ),
        sa.ForeignKeyConstraint(
            ["dataset_version_id"],
            ["dataset_versions.id"],
            name=op.f("fk_evaluations_dataset_version_id_dataset_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["model_id"], ["models.id"], name=op.f("fk_evaluations_model_id_models")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evaluations")),
    )
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_evaluations_model_id"), ["model_id"], unique=False)

    op.create_table(
        "reward_ledger",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("evaluation_id", sa.String(length=36), nullable=False),
        sa.Column("contribution_id", sa.String(length=36), nullable=True),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("wallet_address", sa.String(length=42), nullable=False),
        sa.Column("tokens", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["contribution_id"],
            ["contributions.id"],
            name=op.f("fk_reward_ledger_contribution_id_contributions"),
        ),
        sa.ForeignKeyConstraint(
            ["evaluation_id"],
            ["evaluations.id"],
            name=op.f("fk_reward_ledger_evaluation_id_evaluations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reward_ledger")),
        sa.UniqueConstraint("evaluation_id", "wallet_address", name="uq_reward_ledger_eval_wallet"),
    )
    with op.batch_alter_table("reward_ledger", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_reward_ledger_wallet_address"), ["wallet_address"], unique=False
        )


def downgrade() -> None:

    with op.batch_alter_table("reward_ledger", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reward_ledger_wallet_address"))

    op.drop_table("reward_ledger")
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_evaluations_model_id"))

    op.drop_table("evaluations")
    op.drop_table("key_usage")
    with op.batch_alter_table("contributions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_contributions_submitter_id"))
        batch_op.drop_index(batch_op.f("ix_contributions_model_id"))
        batch_op.drop_index(batch_op.f("ix_contributions_dataset_version_id"))

    op.drop_table("contributions")
    with op.batch_alter_table("benchmark_specs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_benchmark_specs_model_id"))

    op.drop_table("benchmark_specs")
    op.drop_table("org_members")
    with op.batch_alter_table("evaluation_schedules", schema=None) as batch_op:
        batch_op.drop_index("ix_evaluation_schedules_due")

    op.drop_table("evaluation_schedules")
    with op.batch_alter_table("dataset_versions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_dataset_versions_model_id"))

    op.drop_table("dataset_versions")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_keys_user_id"))
        batch_op.drop_index(batch_op.f("ix_api_keys_org_id"))

    op.drop_table("api_keys")
    op.drop_table("organizations")
    op.drop_table("models")
    with op.batch_alter_table("dataset_arrivals", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_dataset_arrivals_run_key"))
        batch_op.drop_index(batch_op.f("ix_dataset_arrivals_received_at"))
        batch_op.drop_index(batch_op.f("ix_dataset_arrivals_model_id"))

    op.drop_table("dataset_arrivals")
    op.drop_table("contributor_profiles")
    op.drop_table("arrival_events")
