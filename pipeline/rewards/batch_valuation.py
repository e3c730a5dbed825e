"""Valuation of a batch's contributions together, and the verdict written for each.

The contributions of a run that passed the checks (`validating`) move to `evaluating` and are
valued together on the model's newest benchmark against the model trained on the owner's base
training data and the accepted data (`pipeline.evaluation.datasets`,
`pipeline.rewards.valuation`): the batch's improvement is the pool, each contribution's share
is its Shapley value among the batch's contributions. A contribution with a positive share in
a batch whose improvement interval lies above 0 stays `evaluating` with "rewards pending"
(`pipeline.rewards.payouts` pays the batch); one whose share is not positive, or every one of a
batch within noise, is `rejected` with the figures; an unexpected error moves it to `failed`. The
contributions, pool, shares and interval are written in one transaction. A contribution of
a model without any BenchmarkSpec goes back to `queued` with a reason and is evaluated by the
first run after a benchmark arrives. When the model's own training code fails, the batch is
given back (`pipeline.evaluation.trainers`): `queued`, or `failed` the second time. A valuation
by the owner's code is measured again by the marketplace's reference
(`pipeline.rewards.reference_check`); when they disagree its payout is held for the operator
(`pipeline.rewards.holds`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from pipeline.checks.known_rows import batch_duplicates, novel_rows
from pipeline.core.errors import DomainError
from pipeline.core.tables import (
    EVALUATING,
    FAILED,
    QUEUED,
    REJECTED,
    VALIDATING,
    BenchmarkSpec,
)
from pipeline.evaluation.batches import Batch, VersionItem
from pipeline.evaluation.datasets import (
    BenchmarkData,
    DatasetFrames,
    accepted_items,
    concat_frames,
    latest_benchmark,
    model_settings,
)
from pipeline.evaluation.fit_engine import FitEngine
from pipeline.evaluation.jobs import fail_job, transition
from pipeline.evaluation.model_claims import ModelClaimLost
from pipeline.evaluation.outcomes import EvaluationOutcome
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.evaluation.trainers import give_back_batch
from pipeline.evaluation.without_cache import (
    WithoutCache,
    WithoutKey,
    model_state_key,
    trained_as_accepted,
)
from pipeline.rewards.budget import BUDGET, TryGate
from pipeline.rewards.players import Player, frame_fingerprint
from pipeline.rewards.reference_check import REFERENCE_ESTIMATORS, ReferenceCheck, check_valuation
from pipeline.rewards.valuation import (
    CACHE_MISS,
    BatchValuation,
    ValuationSettings,
    value_batch,
)
from pipeline.rewards.valuation_records import LeftEvaluating, Players, record_valuation
from pipeline.sandbox.errors import TrainerFailed

if TYPE_CHECKING:
    from pipeline.services import Services

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Inputs:
    """What a batch is valued on: the scorer, the benchmark, the accepted rows (the claimed
    contributions aside) and the key of the model trained on them (the "without" cache)."""

    scorer: BenchmarkScorer
    bench: BenchmarkData
    base: pd.DataFrame | None
    key: WithoutKey
    spec: BenchmarkSpec
    accepted: list[VersionItem]


def valuation_frame(svc: Services, item: VersionItem, frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of a contribution that are valued and, when it is accepted, trained on.

    The one place a contribution's frame is prepared for valuation: rows that duplicate rows
    the model has already accepted, from anyone, are taken out (`pipeline.checks.integrity`), so
    known rows are never paid twice and uniqueness counts against accepted data.
    """
    return novel_rows(svc, item.model_id, frame, exclude_job=item.contribution_id).frame


def value_contributions(
    svc: Services, frames: DatasetFrames, batch: Batch, items: Sequence[VersionItem]
) -> list[EvaluationOutcome]:
    """Claim the batch's checked contributions and value them together (module docstring)."""
    spec = latest_benchmark(svc.db, batch.model_id)
    if spec is None:
        return _wait_for_benchmark(svc, items)
    outcomes: dict[str, EvaluationOutcome] = {}
    claimed = _claim_for_valuation(svc, items, outcomes)
    try:
        inputs = _valuation_inputs(svc, frames, batch, spec, claimed)
    except TrainerFailed as exc:
        outcomes.update(give_back_batch(svc, claimed, exc))
        return [outcomes[item.version] for item in items]
    except Exception as exc:
        for item in claimed:
            outcomes[item.version] = (
                _refuse(svc, item, exc) if isinstance(exc, DomainError) else _fail(svc, item, exc)
            )
        return [outcomes[item.version] for item in items]
    players = _players(svc, frames, inputs.scorer, claimed, outcomes)
    if players:
        _value_and_record(svc, frames, batch, inputs, players, outcomes)
    return [outcomes[item.version] for item in items]


def _wait_for_benchmark(svc: Services, items: Sequence[VersionItem]) -> list[EvaluationOutcome]:
    """Send the checked contributions back to `queued` until the model has a benchmark."""
    reason = "checks passed; waiting for a benchmark: the model has no BenchmarkSpec yet"
    for item in items:
        transition(svc.db, item.contribution_id or "", (VALIDATING,), QUEUED, reason=reason)
    return [
        EvaluationOutcome(None, item.version, "contribution", status=QUEUED, detail=reason)
        for item in items
    ]


def _claim_for_valuation(
    svc: Services, items: Sequence[VersionItem], outcomes: dict[str, EvaluationOutcome]
) -> list[VersionItem]:
    """Move the items' jobs to `evaluating`; those another run moved first are reported."""
    claimed: list[VersionItem] = []
    for item in items:
        if transition(svc.db, item.contribution_id or "", (VALIDATING,), EVALUATING):
            claimed.append(item)
        else:
            outcomes[item.version] = EvaluationOutcome(
                None, item.version, "contribution", detail="claimed elsewhere"
            )
    return claimed


def _valuation_inputs(
    svc: Services,
    frames: DatasetFrames,
    batch: Batch,
    spec: BenchmarkSpec,
    claimed: Sequence[VersionItem],
) -> _Inputs:
    """The scorer on the benchmark, the benchmark, the training rows of the "without" model
    (the owner's base data and the accepted rows, the claimed contributions aside) and the key
    of the model they train."""
    task_type, estimator, paired_fits = model_settings(svc.db, batch.model_id)
    bench = frames.benchmark(spec)
    scorer = BenchmarkScorer(
        bench.frame,
        task_type=task_type,
        estimator=estimator,
        trainer=frames.trainers.for_model(batch.model_id),
        target_column=bench.target_column,
        input_columns=bench.input_columns or None,
        metric_name=bench.metric_name,
        # The owner's choice: the pool measured on K paired fits, with its band.
        paired_fits=paired_fits,
    )
    claimed_jobs = {item.contribution_id for item in claimed}
    accepted = accepted_items(svc.db, batch.model_id, exclude=claimed_jobs)
    key = model_state_key(batch.model_id, spec, accepted, scorer)
    base = bench.training_frame(frames.many(accepted))
    return _Inputs(scorer, bench, base, key, spec, accepted)


def _players(
    svc: Services,
    frames: DatasetFrames,
    scorer: BenchmarkScorer,
    claimed: Sequence[VersionItem],
    outcomes: dict[str, EvaluationOutcome],
) -> Players:
    """The claimed contributions with rows left to value; the others get their verdict here."""
    players: Players = {}
    for item in claimed:
        try:
            frame = valuation_frame(svc, item, frames.version(item))
            scorer.labelled(frame)
        except DomainError as exc:
            outcomes[item.version] = _refuse(svc, item, exc)
            continue
        except Exception as exc:
            outcomes[item.version] = _fail(svc, item, exc)
            continue
        if frame.empty:
            _nothing_to_value(svc, item, outcomes, "once rows already accepted are removed")
            continue
        players[item.contribution_id or ""] = (item, Player(item.contribution_id or "", frame))
    return _without_batch_duplicates(svc, players, outcomes)


def _without_batch_duplicates(
    svc: Services, players: Players, outcomes: dict[str, EvaluationOutcome]
) -> Players:
    """Rows sent by two contributions of the batch stay with the first submitted only."""
    ordered = sorted(players.values(), key=lambda p: p[0].dataset_version_id)
    if len(ordered) < 2:
        return players
    masks = batch_duplicates(svc, ordered[0][0].model_id, [p.frame for _, p in ordered])
    kept: Players = {}
    for (item, player), duplicate in zip(ordered, masks, strict=True):
        if duplicate.all():
            _nothing_to_value(svc, item, outcomes, "once rows another contribution of its "
                              "batch sent first are removed")  # fmt: skip
            continue
        frame = player.frame[~duplicate].reset_index(drop=True) if duplicate.any() else player.frame
        kept[player.key] = (item, Player(player.key, frame))
    return kept


def _nothing_to_value(
    svc: Services, item: VersionItem, outcomes: dict[str, EvaluationOutcome], why: str
) -> None:
    reason = f"nothing to value: no row is left {why}"
    transition(svc.db, item.contribution_id or "", (EVALUATING,), REJECTED, reason=reason)
    outcomes[item.version] = EvaluationOutcome(
        None, item.version, "contribution", status=REJECTED, detail=reason
    )


def _value_and_record(
    svc: Services,
    frames: DatasetFrames,
    batch: Batch,
    inputs: _Inputs,
    players: Players,
    outcomes: dict[str, EvaluationOutcome],
) -> None:
    """Value the players and write the verdicts; a batch that cannot be written is queued again."""
    try:
        valuation = _value_players(svc, inputs, players, outcomes)
        if valuation is None:
            return
        gate = TryGate.prepare(svc, batch.model_id, list(players))
        gate.apply(valuation)
        if BUDGET in valuation.rejected.values():
            # The volume factor counts the rows of the tries paid (a copy once).
            paid = [players[key][1] for key in valuation.accepted]
            kept = {frame_fingerprint(player.frame): player.rows for player in paid}
            valuation.accepted_rows = sum(kept.values())
        check = _reference_check(svc, inputs, players, valuation)
    except TrainerFailed as exc:
        outcomes.update(give_back_batch(svc, [item for item, _ in players.values()], exc))
        return
    except Exception as exc:
        for item, _ in players.values():
            outcomes[item.version] = _fail(svc, item, exc)
        return
    try:
        outcomes.update(
            record_valuation(
                svc,
                batch,
                inputs.bench,
                players,
                valuation,
                gate,
                check,
                paired_fits=inputs.scorer.paired_fits,
            )
        )
        _keep_next_without(svc, frames, inputs, players, valuation)
    except (LeftEvaluating, ModelClaimLost) as exc:
        # The batch is valued again, whole, by a later run.
        log.warning("valuation of model %s not recorded: %s", batch.model_id, exc)
        reason = f"valuation not recorded ({exc}); waiting for the next run"
        for item, _ in players.values():
            transition(svc.db, item.contribution_id or "", (EVALUATING,), QUEUED, reason=reason)
            outcomes[item.version] = EvaluationOutcome(
                None, item.version, "contribution", status=QUEUED, detail=reason
            )


def _reference_check(
    svc: Services, inputs: _Inputs, players: Players, valuation: BatchValuation
) -> ReferenceCheck | None:
    """The reference check of a valuation by the owner's code that pays someone
    (`pipeline.rewards.reference_check`); None for a listed estimator or nothing to pay. A check
    that fails holds the payout."""
    if inputs.scorer.trainer is None or not valuation.accepted:
        return None
    settings = ValuationSettings.from_settings(svc.settings)
    try:
        return check_valuation(
            inputs.scorer,
            inputs.base,
            [player for _, player in players.values()],
            valuation,
            settings=settings,
        )
    except Exception as exc:
        log.exception("reference check of model %s failed", inputs.key.model_id)
        estimator = REFERENCE_ESTIMATORS[inputs.scorer.task_type]
        return ReferenceCheck.failed(estimator, valuation.pool_pct, type(exc).__name__)


def _keep_next_without(
    svc: Services,
    frames: DatasetFrames,
    inputs: _Inputs,
    players: Players,
    valuation: BatchValuation,
) -> None:
    """Keep the model the batch leaves behind as the next batch's "without", when it was trained
    on exactly the rows, in the order, that the model's accepted data now holds (every accepted
    contribution whole, no copy, the new versions after the old): a batch of one that follows
    an accepted one then trains one model."""
    if valuation.with_predictions is None or set(valuation.accepted) != set(valuation.with_keys):
        return
    added = [players[key][0] for key in valuation.with_keys]
    if any(len(players[i.contribution_id or ""][1].frame) != len(frames.version(i)) for i in added):
        return  # rows already accepted were taken out: the version's rows differ
    model_id = inputs.key.model_id
    now = accepted_items(svc.db, model_id)
    if trained_as_accepted(inputs.accepted, added, now):
        key = model_state_key(model_id, inputs.spec, now, inputs.scorer)
        WithoutCache(svc.store).put(key, valuation.with_predictions)


def _value_players(
    svc: Services, inputs: _Inputs, players: Players, outcomes: dict[str, EvaluationOutcome]
) -> BatchValuation | None:
    """Value the players; a player the estimator or metric refuses is rejected alone.

    On a DomainError of the batch, each player is tried alone with the accepted data; those
    refused are rejected (and removed from `players`) and the rest are valued again. "Without"
    comes from the cache when the model's accepted state is unchanged, and is stored on a miss.
    """
    cache = WithoutCache(svc.store)
    scorer, base = inputs.scorer, inputs.base
    without = cache.get(inputs.key, scorer)

    settings = ValuationSettings.from_settings(svc.settings)
    if scorer.trainer is not None:
        # Each coalition is a sandboxed process with its own memory limit, started from this
        # step (its Pipes session): local threads only, at most TRAINER_MAX_PARALLEL.
        workers = min(settings.engine.workers, svc.settings.trainer_max_parallel)
        settings = dataclasses.replace(settings, engine=FitEngine(workers, None))

    def value(batch: Players) -> BatchValuation:
        nonlocal without
        valuation = value_batch(
            scorer,
            base,
            [p for _, p in batch.values()],
            higher_is_better=inputs.bench.metric_direction == "higher_is_better",
            settings=settings,
            without=without,
        )
        if valuation.without_cache == CACHE_MISS and valuation.without is not None:
            cache.put(inputs.key, valuation.without)
            without = valuation.without
        return valuation

    try:
        return value(players)
    except DomainError as exc:
        if len(players) == 1:
            [(item, _)] = players.values()
            outcomes[item.version] = _refuse(svc, item, exc)
            players.clear()
            return None
    for key, (item, player) in list(players.items()):
        try:
            scorer.score(concat_frames([f for f in (base, player.frame) if f is not None]))
        except DomainError as exc:
            outcomes[item.version] = _refuse(svc, item, exc)
            del players[key]
    if not players:
        return None
    return value(players)


def _refuse(svc: Services, item: VersionItem, exc: DomainError) -> EvaluationOutcome:
    reason = f"evaluation refused the data: {exc.detail}"
    transition(svc.db, item.contribution_id or "", (EVALUATING,), REJECTED, reason=reason)
    return EvaluationOutcome(None, item.version, "contribution", status=REJECTED, detail=reason)


def _fail(svc: Services, item: VersionItem, exc: Exception) -> EvaluationOutcome:
    fail_job(svc.db, item, "evaluation", exc)
    return EvaluationOutcome(
        None, item.version, "contribution", status=FAILED, detail=type(exc).__name__
    )
