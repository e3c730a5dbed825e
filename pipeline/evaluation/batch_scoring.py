"""Scoring of a batch: valuation of its contributions together, and re-scores of the model.

The contributions of a run that passed the checks (`validating`) move to `evaluating` and are
valued together on the model's newest benchmark against the model trained on the accepted
data (`pipeline.rewards.valuation`): the batch's improvement is the pool, each contribution's share
is its Shapley value among the batch's contributions. A contribution with a positive share in
a batch whose improvement interval lies above 0 stays `evaluating` with "rewards pending"
(`pipeline.rewards.payouts` pays the batch); one whose share is not positive, or every one of a
batch within noise, is `rejected` with the figures; an unexpected error moves it to `failed`. The
contributions, pool, shares and interval are written in one transaction. A contribution of
a model without any BenchmarkSpec goes back to `queued` with a reason and is evaluated by the
first run after a benchmark arrives. A benchmark version, a scheduled run or a run with nothing
pending re-scores the model trained on all accepted rows (`rescore_model`).

Accepted training rows are the rows of contributions accepted by a valuation: status
`rewarded`, or `evaluating` with a positive share (valued, rewards pending). Rows rejected are
never training data, so a contribution that makes the model worse cannot lower the baseline
the next one is measured against. `accepted_items` lists them;
`pipeline.rewards.ledger.accepted_data` is the audit view (which versions, who).

This module knows nothing of Dagster; `assets/` wraps it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, and_, or_, select

from pipeline.core.db import Database
from pipeline.core.errors import DomainError, InvalidInput
from pipeline.core.tables import (
    BenchmarkSpec,
    Contribution,
    DatasetVersion,
    Evaluation,
    Model,
    new_uuid,
    utcnow,
)
from pipeline.evaluation.batches import Batch, Services, VersionItem, load_frame, version_item
from pipeline.evaluation.jobs import (
    EVALUATING,
    FAILED,
    QUEUED,
    REJECTED,
    REWARDED,
    VALIDATING,
    fail_job,
    job_status,
    normalize_trigger,
    transition,
)
from pipeline.rewards.valuation import BatchValuation, Player

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.evaluation.scorer import BenchmarkScorer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvaluationOutcome:
    """One evaluation recorded by a run (a contribution measured, or a re-score)."""

    evaluation_id: str | None
    version: str | None
    kind: str  # contribution | rescore
    metric_name: str | None = None
    score: float | None = None
    baseline_score: float | None = None
    improvement_pct: float | None = None
    status: str | None = None
    detail: str = ""
    pool_pct: float | None = None
    interval_low: float | None = None
    interval_high: float | None = None
    batch_size: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BenchmarkData:
    spec_id: str
    metric_name: str
    metric_direction: str
    target_column: str
    input_columns: list[str]
    frame: Any  # pandas DataFrame: rows of the evaluation split


class _Frames:
    """Dataset frames read once per step; accepted training versions are read in parallel."""

    def __init__(self, svc: Services) -> None:
        self.svc = svc
        self._frames: dict[int, Any] = {}
        self._benchmarks: dict[str, BenchmarkData] = {}

    def version(self, item: VersionItem) -> pd.DataFrame:
        if item.dataset_version_id not in self._frames:
            self._frames[item.dataset_version_id] = load_frame(self.svc.store, item)
        return self._frames[item.dataset_version_id]

    def many(self, items: Sequence[VersionItem]) -> list[pd.DataFrame]:
        missing = [i for i in items if i.dataset_version_id not in self._frames]
        if missing:
            workers = max(1, min(self.svc.settings.parallel_workers, len(missing)))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                for item, frame in zip(
                    missing, pool.map(lambda i: load_frame(self.svc.store, i), missing), strict=True
                ):
                    self._frames[item.dataset_version_id] = frame
        return [self._frames[i.dataset_version_id] for i in items]

    def benchmark(self, spec: BenchmarkSpec) -> BenchmarkData:
        if spec.id not in self._benchmarks:
            with self.svc.db.session() as session:
                dv = session.get(DatasetVersion, spec.dataset_version_id)
            if dv is None:
                raise DomainError(f"benchmark {spec.id} has no dataset version")
            frame = benchmark_eval_rows(
                load_frame(self.svc.store, version_item(dv)), spec.eval_split
            )
            self._benchmarks[spec.id] = BenchmarkData(
                spec.id,
                spec.metric_name,
                spec.metric_direction,
                spec.target_column,
                list(spec.input_columns or []),
                frame,
            )
        return self._benchmarks[spec.id]


SPLIT_COLUMN = "split"


def benchmark_eval_rows(frame: pd.DataFrame, eval_split: str) -> pd.DataFrame:
    """The rows a benchmark is scored on.

    With a `split` column, the rows whose split equals `eval_split` (none is an error);
    without one, every row. The split column itself is dropped.
    """
    if SPLIT_COLUMN not in frame.columns:
        return frame
    rows = frame[frame[SPLIT_COLUMN].astype(str) == eval_split]
    if rows.empty:
        raise DomainError(f"the benchmark has no rows with split {eval_split!r}")
    return rows.drop(columns=[SPLIT_COLUMN]).reset_index(drop=True)


def latest_benchmark(db: Database, model_id: int) -> BenchmarkSpec | None:
    """The model's newest BenchmarkSpec: the one on the highest dataset version."""
    with db.session() as session:
        return session.scalar(
            select(BenchmarkSpec)
            .join(DatasetVersion, BenchmarkSpec.dataset_version_id == DatasetVersion.id)
            .where(BenchmarkSpec.model_id == model_id)
            .order_by(DatasetVersion.version_number.desc(), BenchmarkSpec.created_at.desc())
            .limit(1)
        )


def accepted_items(
    db: Database, model_id: int, exclude: Collection[str | None] = ()
) -> list[VersionItem]:
    """Versions whose rows train the model (see the module docstring)."""
    with db.session() as session:
        rows = session.execute(
            select(Contribution.id, DatasetVersion)
            .join(DatasetVersion, Contribution.dataset_version_id == DatasetVersion.id)
            .where(Contribution.model_id == model_id, accepted_contribution())
            .order_by(DatasetVersion.version_number)
        ).all()
    return [version_item(dv, contribution_id=job) for job, dv in rows if job not in exclude]


def accepted_contribution() -> ColumnElement[bool]:
    """SQL condition of a contribution whose rows train the model (see the module docstring)."""
    return or_(
        Contribution.status == REWARDED,
        and_(Contribution.status == EVALUATING, Contribution.improvement_pct > 0),
    )


def evaluate_batch(svc: Services, batch: Batch) -> list[EvaluationOutcome]:
    """Re-score for the batch's benchmarks, value its contributions together, then re-score
    when the batch asks for it.
    """
    frames = _Frames(svc)
    outcomes = [
        _guarded_rescore(item.version, partial(_rescore_on, svc, frames, batch, item))
        for item in batch.items
        if item.benchmark_spec_id is not None
    ]
    pending = [
        item
        for item in batch.items
        if item.benchmark_spec_id is None
        and item.is_contribution
        and job_status(svc.db, item.contribution_id or "") == VALIDATING
    ]
    if pending:
        outcomes.extend(_value_contributions(svc, frames, batch, pending))
    if batch.rescore:
        outcomes.append(
            _guarded_rescore(
                None,
                lambda: rescore_model(
                    svc, batch.model_id, trigger=batch.trigger, run_id=batch.run_id, frames=frames
                ),
            )
        )
    return outcomes


def _guarded_rescore(
    version: str | None, score: Callable[[], EvaluationOutcome | None]
) -> EvaluationOutcome:
    """A re-score that cannot stop the rest of the run; its failure is reported in the outcome."""
    try:
        outcome = score()
    except Exception as exc:
        log.exception("re-score for %s failed", version or "the model")
        detail = exc.detail if isinstance(exc, DomainError) else type(exc).__name__
        return EvaluationOutcome(
            None, version, "rescore", status=FAILED, detail=f"re-score failed: {detail}"
        )
    if outcome is None:
        return EvaluationOutcome(None, version, "rescore", detail="no benchmark: nothing to score")
    return outcome


def _model_settings(db: Database, model_id: int) -> tuple[str, str]:
    with db.session() as session:
        model = session.get(Model, model_id)
        if model is None:
            raise InvalidInput(f"model {model_id} not found")
        return model.task_type, model.estimator


def valuation_frame(svc: Services, item: VersionItem, frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of a contribution that are valued and, when it is accepted, trained on.

    The one place a contribution's frame is prepared for valuation: rows that duplicate rows
    the model has already accepted, from anyone, are taken out (`pipeline.checks.integrity`), so
    known rows are never paid twice and uniqueness counts against accepted data.
    """
    from pipeline.checks.integrity import novel_rows

    return novel_rows(svc, item.model_id, frame, exclude_job=item.contribution_id).frame


def _value_contributions(
    svc: Services, frames: _Frames, batch: Batch, items: Sequence[VersionItem]
) -> list[EvaluationOutcome]:
    """Claim the batch's checked contributions and value them together (module docstring)."""
    from pipeline.evaluation.scorer import BenchmarkScorer

    spec = latest_benchmark(svc.db, batch.model_id)
    if spec is None:
        reason = "checks passed; waiting for a benchmark: the model has no BenchmarkSpec yet"
        for item in items:
            transition(svc.db, item.contribution_id or "", (VALIDATING,), QUEUED, reason=reason)
        return [
            EvaluationOutcome(None, item.version, "contribution", status=QUEUED, detail=reason)
            for item in items
        ]
    outcomes: dict[str, EvaluationOutcome] = {}
    claimed: list[VersionItem] = []
    for item in items:
        if transition(svc.db, item.contribution_id or "", (VALIDATING,), EVALUATING):
            claimed.append(item)
        else:
            outcomes[item.version] = EvaluationOutcome(
                None, item.version, "contribution", detail="claimed elsewhere"
            )
    try:
        task_type, estimator = _model_settings(svc.db, batch.model_id)
        bench = frames.benchmark(spec)
        scorer = BenchmarkScorer(
            bench.frame,
            task_type=task_type,
            estimator=estimator,
            target_column=bench.target_column,
            input_columns=bench.input_columns or None,
            metric_name=bench.metric_name,
        )
        claimed_jobs = {item.contribution_id for item in claimed}
        base = _concat(frames.many(accepted_items(svc.db, batch.model_id, exclude=claimed_jobs)))
    except DomainError as exc:
        for item in claimed:
            outcomes[item.version] = _refuse(svc, item, exc)
        return [outcomes[item.version] for item in items]
    except Exception as exc:
        for item in claimed:
            outcomes[item.version] = _fail(svc, item, exc)
        return [outcomes[item.version] for item in items]

    players: dict[str, tuple[VersionItem, Player]] = {}
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
            reason = "nothing to value: no row is left once rows already accepted are removed"
            transition(svc.db, item.contribution_id or "", (EVALUATING,), REJECTED, reason=reason)
            outcomes[item.version] = EvaluationOutcome(
                None, item.version, "contribution", status=REJECTED, detail=reason
            )
            continue
        players[item.contribution_id or ""] = (item, Player(item.contribution_id or "", frame))
    if players:
        try:
            valuation = _value_players(svc, scorer, base, players, outcomes, bench)
        except Exception as exc:
            for item, _ in players.values():
                outcomes[item.version] = _fail(svc, item, exc)
        else:
            if valuation is not None:
                try:
                    outcomes.update(_record_valuation(svc, batch, spec.id, players, valuation))
                except _LeftEvaluating as exc:
                    # The batch is valued again, whole, by a later run.
                    log.warning("valuation of model %s not recorded: %s", batch.model_id, exc)
                    reason = f"valuation not recorded ({exc}); waiting for the next run"
                    for item, _ in players.values():
                        transition(
                            svc.db, item.contribution_id or "", (EVALUATING,), QUEUED, reason=reason
                        )
                        outcomes[item.version] = EvaluationOutcome(
                            None, item.version, "contribution", status=QUEUED, detail=reason
                        )
    return [outcomes[item.version] for item in items]


class _LeftEvaluating(Exception):
    """A job of the batch is no longer `evaluating`: the valuation is not written at all."""


def _value_players(
    svc: Services,
    scorer: BenchmarkScorer,
    base: pd.DataFrame | None,
    players: dict[str, tuple[VersionItem, Player]],
    outcomes: dict[str, EvaluationOutcome],
    bench: BenchmarkData,
) -> BatchValuation | None:
    """Value the players; a player the estimator or metric refuses is rejected alone.

    On a DomainError of the batch, each player is tried alone with the accepted data; those
    refused are rejected (and removed from `players`) and the rest are valued again.
    """
    from pipeline.rewards.valuation import ValuationSettings, value_batch

    settings = ValuationSettings.from_settings(svc.settings)
    higher = bench.metric_direction == "higher_is_better"
    try:
        return value_batch(
            scorer,
            base,
            [p for _, p in players.values()],
            higher_is_better=higher,
            settings=settings,
        )
    except DomainError as exc:
        if len(players) == 1:
            [(item, _)] = players.values()
            outcomes[item.version] = _refuse(svc, item, exc)
            players.clear()
            return None
    for key, (item, player) in list(players.items()):
        try:
            scorer.score(_concat([f for f in (base, player.frame) if f is not None]))
        except DomainError as exc:
            outcomes[item.version] = _refuse(svc, item, exc)
            del players[key]
    if not players:
        return None
    return value_batch(
        scorer, base, [p for _, p in players.values()], higher_is_better=higher, settings=settings
    )


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
    spec_id: str,
    players: dict[str, tuple[VersionItem, Player]],
    valuation: BatchValuation,
) -> dict[str, EvaluationOutcome]:
    """Write every player's Evaluation and job verdict in one transaction (all or nothing)."""
    interval = valuation.interval
    batch_rows = valuation.accepted_rows
    valuation_id = new_uuid()
    outcomes: dict[str, EvaluationOutcome] = {}
    with svc.db.session() as session:
        for key, (item, player) in players.items():
            share = valuation.shares[key]
            accepted = key in valuation.accepted
            status = EVALUATING if accepted else REJECTED
            reason = valuation_reason(valuation, key)
            evaluation = Evaluation(
                model_id=batch.model_id,
                dataset_version_id=item.dataset_version_id,
                benchmark_spec_id=spec_id,
                trigger=batch.trigger,
                metric_name=valuation.metric_name,
                metric_direction=valuation.direction,
                score=valuation.score_with,
                baseline_score=valuation.score_without,
                improvement_pct=share,
                run_id=batch.run_id,
                valuation_id=valuation_id,
                pool_pct=valuation.pool_pct,
                interval_low=interval.low if interval else None,
                interval_high=interval.high if interval else None,
                interval_level=interval.level if interval else None,
                resamples=interval.resamples if interval else None,
                batch_size=valuation.players,
                batch_rows=batch_rows,
                valuation_method=valuation.method,
            )
            session.add(evaluation)
            session.flush()
            job = session.get(Contribution, key, with_for_update=True)
            if job is None or job.status != EVALUATING:
                # Shares only add up to the pool as a whole: nothing of the batch is written.
                raise _LeftEvaluating(f"contribution {key} left `evaluating` meanwhile")
            job.status = status
            job.reason = reason
            job.improvement_pct = share
            job.updated_at = utcnow()
            job.quality = {
                **(job.quality or {}),
                "valuation": {
                    "valuation_id": valuation_id,
                    "evaluation_id": evaluation.id,
                    "accepted": accepted,
                    "metric": valuation.metric_name,
                    "score_without": valuation.score_without,
                    "score_with": valuation.score_with,
                    "denominator": valuation.denominator,
                    "pool_pct": valuation.pool_pct,
                    "share_pct": share,
                    "interval": interval.as_dict() if interval else None,
                    "method": valuation.method,
                    "batch_size": valuation.players,
                    "batch_rows": batch_rows,
                    "valued_rows": player.rows,
                },
            }
            outcomes[item.version] = EvaluationOutcome(
                evaluation.id,
                item.version,
                "contribution",
                metric_name=valuation.metric_name,
                score=valuation.score_with,
                baseline_score=valuation.score_without,
                improvement_pct=share,
                status=status,
                detail=reason,
                pool_pct=valuation.pool_pct,
                interval_low=interval.low if interval else None,
                interval_high=interval.high if interval else None,
                batch_size=valuation.players,
            )
    return outcomes


def valuation_reason(valuation: BatchValuation, key: str) -> str:
    """A job's reason after valuation: the figures that accepted or rejected it."""
    from pipeline.rewards.valuation import NOISE

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


def _concat(frames: Sequence[pd.DataFrame]) -> pd.DataFrame | None:
    import pandas as pd

    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else None


def _rescore_on(
    svc: Services, frames: _Frames, batch: Batch, item: VersionItem
) -> EvaluationOutcome:
    with svc.db.session() as session:
        spec = session.get(BenchmarkSpec, item.benchmark_spec_id)
    if spec is None:
        return EvaluationOutcome(None, item.version, "rescore", detail="benchmark spec is gone")
    outcome = rescore_model(
        svc,
        batch.model_id,
        trigger=batch.trigger,
        run_id=batch.run_id,
        spec=spec,
        dataset_version_id=item.dataset_version_id,
        frames=frames,
    )
    return outcome or EvaluationOutcome(None, item.version, "rescore", detail="not scored")


def rescore_model(
    svc: Services,
    model_id: int,
    *,
    trigger: str,
    run_id: str | None = None,
    spec: BenchmarkSpec | None = None,
    dataset_version_id: int | None = None,
    frames: _Frames | None = None,
) -> EvaluationOutcome | None:
    """Score the model trained on all accepted rows; records an Evaluation (metric history).

    `baseline_score` is the trivial baseline (majority class or mean) and `improvement_pct`
    the model's gain over it. Returns None when the model has no benchmark.
    """
    from pipeline.evaluation.comparison import evaluate_contribution

    frames = frames or _Frames(svc)
    spec = spec or latest_benchmark(svc.db, model_id)
    if spec is None:
        log.info("model %s has no benchmark; nothing to re-score", model_id)
        return None
    task_type, estimator = _model_settings(svc.db, model_id)
    bench = frames.benchmark(spec)
    accepted = _concat(frames.many(accepted_items(svc.db, model_id)))
    import pandas as pd

    result = evaluate_contribution(
        None,
        accepted if accepted is not None else pd.DataFrame(),
        bench.frame,
        task_type=task_type,
        estimator=estimator,
        target_column=bench.target_column,
        input_columns=bench.input_columns or None,
        metric_name=bench.metric_name,
        metric_direction=bench.metric_direction,
    )
    with svc.db.session() as session:
        evaluation = Evaluation(
            model_id=model_id,
            dataset_version_id=dataset_version_id,
            benchmark_spec_id=spec.id,
            trigger=normalize_trigger(trigger),
            metric_name=bench.metric_name,
            metric_direction=bench.metric_direction,
            score=result.score_with,
            baseline_score=result.score_without,
            improvement_pct=result.improvement_pct,
            run_id=run_id,
        )
        session.add(evaluation)
        session.flush()
        evaluation_id = evaluation.id
    with svc.db.session() as session:
        version = (
            session.scalar(
                select(DatasetVersion.version).where(DatasetVersion.id == dataset_version_id)
            )
            if dataset_version_id
            else None
        )
    return EvaluationOutcome(
        evaluation_id,
        version,
        "rescore",
        metric_name=bench.metric_name,
        score=result.score_with,
        baseline_score=result.score_without,
        improvement_pct=result.improvement_pct,
        detail=f"{bench.metric_name} {result.score_with:.4f} trained on "
        f"{result.train_rows_with} accepted rows",
    )
