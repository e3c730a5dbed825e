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
given back (`pipeline.evaluation.trainers`): `queued`, or `failed` the second time.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd
from sqlalchemy.orm import Session

from pipeline.checks.known_rows import batch_duplicates, novel_rows
from pipeline.core.errors import DomainError
from pipeline.core.tables import (
    EVALUATING,
    FAILED,
    QUEUED,
    REJECTED,
    VALIDATING,
    BenchmarkSpec,
    Contribution,
    Evaluation,
    new_uuid,
    utcnow,
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
from pipeline.evaluation.model_claims import ModelClaimLost, fence
from pipeline.evaluation.outcomes import EvaluationOutcome
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.evaluation.trainers import give_back_batch
from pipeline.evaluation.without_cache import (
    WithoutCache,
    WithoutKey,
    model_state_key,
    trained_as_accepted,
)
from pipeline.rewards.budget import BUDGET, Decision, TryGate, budget_reason
from pipeline.rewards.valuation import (
    CACHE_MISS,
    NOISE,
    BatchValuation,
    Player,
    ValuationSettings,
    frame_fingerprint,
    value_batch,
)
from pipeline.sandbox.errors import TrainerFailed

if TYPE_CHECKING:
    from pipeline.bootstrap import Services

log = logging.getLogger(__name__)

# A batch's players by contribution id: the batch item and the rows valued.
Players = dict[str, tuple[VersionItem, Player]]


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
    task_type, estimator = model_settings(svc.db, batch.model_id)
    bench = frames.benchmark(spec)
    scorer = BenchmarkScorer(
        bench.frame,
        task_type=task_type,
        estimator=estimator,
        trainer=frames.trainers.for_model(batch.model_id),
        target_column=bench.target_column,
        input_columns=bench.input_columns or None,
        metric_name=bench.metric_name,
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
    except TrainerFailed as exc:
        outcomes.update(give_back_batch(svc, [item for item, _ in players.values()], exc))
        return
    except Exception as exc:
        for item, _ in players.values():
            outcomes[item.version] = _fail(svc, item, exc)
        return
    try:
        outcomes.update(_record_valuation(svc, batch, inputs.bench, players, valuation, gate))
        _keep_next_without(svc, frames, inputs, players, valuation)
    except (_LeftEvaluating, ModelClaimLost) as exc:
        # The batch is valued again, whole, by a later run.
        log.warning("valuation of model %s not recorded: %s", batch.model_id, exc)
        reason = f"valuation not recorded ({exc}); waiting for the next run"
        for item, _ in players.values():
            transition(svc.db, item.contribution_id or "", (EVALUATING,), QUEUED, reason=reason)
            outcomes[item.version] = EvaluationOutcome(
                None, item.version, "contribution", status=QUEUED, detail=reason
            )


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


class _LeftEvaluating(Exception):
    """A job of the batch is no longer `evaluating`: the valuation is not written at all."""


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


def _record_valuation(
    svc: Services,
    batch: Batch,
    bench: BenchmarkData,
    players: Players,
    valuation: BatchValuation,
    gate: TryGate,
) -> dict[str, EvaluationOutcome]:
    """Write every player's Evaluation, job verdict and try in one transaction (all or nothing)."""
    valuation_id = new_uuid()
    outcomes: dict[str, EvaluationOutcome] = {}
    with svc.db.session() as session:
        fence(session, svc, batch.model_id, batch.claim, strict=batch.model_held)
        for key, (item, player) in players.items():
            evaluation = _evaluation_row(batch, bench, item, valuation, valuation_id, key)
            session.add(evaluation)
            session.flush()
            decision = gate.decisions.get(key)
            detail = _valuation_detail(valuation, evaluation, player)
            _write_verdict(session, key, valuation, detail, decision)
            outcomes[item.version] = _valued_outcome(evaluation, item, valuation, key, decision)
        gate.record(session, valuation_id)
    return outcomes


def _evaluation_row(
    batch: Batch,
    bench: BenchmarkData,
    item: VersionItem,
    valuation: BatchValuation,
    valuation_id: str,
    key: str,
) -> Evaluation:
    """The Evaluation of one player: the batch's figures and the player's share."""
    interval = valuation.interval
    return Evaluation(
        model_id=batch.model_id,
        dataset_version_id=item.dataset_version_id,
        benchmark_spec_id=bench.spec_id,
        trigger=batch.trigger,
        metric_name=valuation.metric_name,
        metric_direction=valuation.direction,
        score=valuation.score_with,
        baseline_score=valuation.score_without,
        improvement_pct=valuation.shares[key],
        run_id=batch.run_id,
        valuation_id=valuation_id,
        pool_pct=valuation.pool_pct,
        interval_low=interval.low if interval else None,
        interval_high=interval.high if interval else None,
        interval_level=interval.level if interval else None,
        resamples=interval.resamples if interval else None,
        batch_size=valuation.players,
        batch_rows=valuation.accepted_rows,
        base_rows=bench.base_rows,
        valuation_method=valuation.method,
    )


def _valuation_detail(
    valuation: BatchValuation, evaluation: Evaluation, player: Player
) -> dict[str, Any]:
    """The figures kept in the job's `quality` JSON under `valuation`."""
    interval = valuation.interval
    return {
        "valuation_id": evaluation.valuation_id,
        "evaluation_id": evaluation.id,
        "accepted": player.key in valuation.accepted,
        "metric": valuation.metric_name,
        "score_without": valuation.score_without,
        "score_with": valuation.score_with,
        "denominator": valuation.denominator,
        "pool_pct": valuation.pool_pct,
        "share_pct": valuation.shares[player.key],
        "interval": interval.as_dict() if interval else None,
        "method": valuation.method,
        "batch_size": valuation.players,
        "batch_rows": valuation.accepted_rows,
        "valued_rows": player.rows,
        "base_rows": evaluation.base_rows,
        "sample_rows": valuation.sample_rows,
        "without_cache": valuation.without_cache,
        "models_trained": valuation.coalitions,
    }


def _write_verdict(
    session: Session,
    key: str,
    valuation: BatchValuation,
    detail: dict[str, Any],
    decision: Decision | None,
) -> None:
    """Move the job to its verdict; raises _LeftEvaluating when it is no longer `evaluating`."""
    job = session.get(Contribution, key, with_for_update=True)
    if job is None or job.status != EVALUATING:
        # Shares only add up to the pool as a whole: nothing of the batch is written.
        raise _LeftEvaluating(f"contribution {key} left `evaluating` meanwhile")
    job.status = EVALUATING if key in valuation.accepted else REJECTED
    job.reason = valuation_reason(valuation, key, decision) + known_rows_note(
        job.quality, detail["valued_rows"]
    )
    job.improvement_pct = valuation.shares[key]
    job.updated_at = utcnow()
    budget = {"budget": decision.view()} if decision is not None else {}
    job.quality = {**(job.quality or {}), "valuation": detail, **budget}


def _valued_outcome(
    evaluation: Evaluation,
    item: VersionItem,
    valuation: BatchValuation,
    key: str,
    decision: Decision | None,
) -> EvaluationOutcome:
    interval = valuation.interval
    return EvaluationOutcome(
        evaluation.id,
        item.version,
        "contribution",
        metric_name=valuation.metric_name,
        score=valuation.score_with,
        baseline_score=valuation.score_without,
        improvement_pct=valuation.shares[key],
        status=EVALUATING if key in valuation.accepted else REJECTED,
        detail=valuation_reason(valuation, key, decision),
        pool_pct=valuation.pool_pct,
        interval_low=interval.low if interval else None,
        interval_high=interval.high if interval else None,
        batch_size=valuation.players,
        base_rows=evaluation.base_rows,
        valuation_method=valuation.method,
        sample_rows=valuation.sample_rows,
        without_cache=valuation.without_cache,
        models_trained=valuation.coalitions,
    )


def known_rows_note(quality: dict[str, Any] | None, valued_rows: int) -> str:
    """Why some of a contribution's rows were not valued: the model already trains on them."""
    integrity = (quality or {}).get("integrity") or {}
    rows = integrity.get("rows") or 0
    if valued_rows >= rows:
        return ""
    known = rows - valued_rows
    base = min(known, integrity.get("known_base_rows") or 0)
    where = f" ({base} in the owner's base training data)" if base else ""
    return (
        f"; {known} of {rows} rows are already in the model's training data{where} and earn nothing"
    )


def valuation_reason(valuation: BatchValuation, key: str, decision: Decision | None = None) -> str:
    """A job's reason after valuation: the figures that accepted or rejected it; for a rejected
    try, what the supplier's budget asks of the next ones."""
    reason = _verdict_reason(valuation, key, decision)
    if decision is not None and not decision.accepted:
        reason += f". {decision.summary()}"
    return reason


def _verdict_reason(valuation: BatchValuation, key: str, decision: Decision | None) -> str:
    if decision is not None and valuation.rejected.get(key) == BUDGET:
        return budget_reason(valuation, decision)

    metric = valuation.metric_name
    change = f"{metric} {valuation.score_without:.4f} → {valuation.score_with:.4f}"
    share = valuation.shares[key]
    together = (
        f"; {valuation.players} contributions valued together, {valuation.method} Shapley shares"
        if valuation.players > 1
        else ""
    )
    interval = valuation.interval.describe() if valuation.interval else ""
    if key in valuation.accepted:
        if valuation.players == 1:
            return f"improved {change} ({share:+.2f} %, {interval}); rewards pending"
        return (
            f"improved: share {share:+.2f} % of the batch's {valuation.pool_pct:+.2f} % "
            f"({change}, {interval}{together}); rewards pending"
        )
    if valuation.rejected.get(key) == NOISE:
        return (
            f"within noise: {change} ({valuation.pool_pct:+.2f} %, {interval}: the lower bound "
            f"is not above 0); not trained on"
        )
    if valuation.players == 1:
        return f"no improvement: {change} ({share:+.2f} %)"
    return (
        f"no improvement: its share of the batch's {metric} change is {share:+.2f} %"
        f"{together}; not trained on"
    )
