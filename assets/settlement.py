"""The `settlement` asset: one partition per weekly epoch, thin over `pipeline.settlement`.

A materialization settles its epoch (`settle_epoch`: snapshot, tree, mint, root) with the ledger
rows written before the epoch's end, and shows root, wallets, total, chain, contract,
transaction and block. A chain that is down or a reverted transaction fails the run (retried by
the retry policy); the next materialization resumes where it stopped, with no second mint or
root. The `settlement_reconciles` check compares what the chain minted and paid (events) with
the ledger. The schedule asks for the epoch that just ended, once a week.
"""

from datetime import timedelta

import dagster as dg

from assets.resources import MarketplaceResource
from pipeline.core.config import Settings
from pipeline.settlement.epoch_keys import epoch_end, epoch_of

SETTLEMENT_JOB = "settlement_job"
SETTLEMENT_SCHEDULE = "settlement_schedule"
# end_offset=1: the week in progress can be materialized by hand (its rows up to now).
EPOCHS = dg.WeeklyPartitionsDefinition(start_date="2026-01-05", day_offset=1, end_offset=1)
OFF = "settlement is off: set SETTLEMENT_RPC_URL and the rest (docs/settlement.md)"


@dg.asset(
    name="settlement",
    partitions_def=EPOCHS,
    group_name="settlement",
    retry_policy=dg.RetryPolicy(max_retries=3, delay=30, backoff=dg.Backoff.EXPONENTIAL),
    description="One epoch of rewards settled on chain: the ledger's snapshot as a Merkle root "
    "published on the distributor, the difference minted to it.",
)
def settlement(
    context: dg.AssetExecutionContext, marketplace: MarketplaceResource
) -> dg.MaterializeResult:
    from pipeline.settlement.epochs import settle_epoch
    from pipeline.settlement.target import SettlementOff, settlement_enabled, settlement_target

    settings = marketplace.settings()
    if not settlement_enabled(settings):
        raise dg.Failure(OFF, allow_retries=False)
    try:
        target = settlement_target(settings)
    except SettlementOff as exc:  # configuration: retrying would not help
        raise dg.Failure(exc.detail, allow_retries=False) from None
    epoch = context.partition_key
    services = marketplace.services
    # A ChainError (chain down, a revert) fails the step, and the retry policy runs it again.
    view = settle_epoch(services.db, services.store, target, epoch, before=epoch_end(epoch))
    if view is None:
        return dg.MaterializeResult(
            metadata={"status": "nothing to settle: no ledger row since the last epoch"}
        )
    return dg.MaterializeResult(
        metadata={
            "status": view["status"],
            "root": view["root"],
            "wallets": view["wallets"],
            "total (base units)": view["totalAmount"],
            "minted (base units)": view["mintedAmount"],
            "chain id": view["chainId"],
            "contract": view["distributor"],
            "token": view["token"],
            "transaction": view["rootTransaction"],
            "block": view["block"],
            "ledger row": view["ledgerRowId"],
        }
    )


@dg.asset_check(
    asset=settlement,
    name="settlement_reconciles",
    description="Minted and claimed on chain (events) agree with the settled ledger.",
)
def settlement_reconciles(marketplace: MarketplaceResource) -> dg.AssetCheckResult:
    from pipeline.settlement.reconcile import reconcile
    from pipeline.settlement.target import configured_contracts, connect, settlement_enabled

    settings = marketplace.settings()
    if not settlement_enabled(settings):
        return dg.AssetCheckResult(passed=True, metadata={"status": OFF})
    result = reconcile(marketplace.services.db, connect(settings), configured_contracts(settings))
    return dg.AssetCheckResult(
        passed=result.passed,
        metadata={
            "settled (base units)": str(result.settled_total),
            "minted (base units)": str(result.minted),
            "claimed (base units)": str(result.claimed),
            "distributor balance": str(result.distributor_balance),
            "problems": "; ".join(result.problems) or "none",
        },
    )


SETTLEMENT_ASSET_JOB = dg.define_asset_job(
    SETTLEMENT_JOB,
    selection=dg.AssetSelection.assets(settlement),
    partitions_def=EPOCHS,
    executor_def=dg.in_process_executor,
    description="Settles one weekly epoch of rewards on chain.",
)


def make_settlement_schedule(settings: Settings) -> dg.ScheduleDefinition:
    """Weekly (SETTLEMENT_SCHEDULE): the epoch that just ended; skipped while settlement is off."""

    @dg.schedule(
        name=SETTLEMENT_SCHEDULE,
        cron_schedule=settings.settlement_schedule,
        job=SETTLEMENT_ASSET_JOB,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    def settlement_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        from pipeline.core.config import load_settings
        from pipeline.settlement.target import settlement_enabled

        if not settlement_enabled(load_settings()):
            return dg.SkipReason(OFF)
        epoch = epoch_of(context.scheduled_execution_time - timedelta(days=7))
        return dg.RunRequest(run_key=f"settlement-{epoch}", partition_key=epoch)

    return settlement_schedule
