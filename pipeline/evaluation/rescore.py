"""Re-scores of a model: the model trained on the owner's base data and all accepted rows,
scored on a benchmark.

A benchmark version, a scheduled run or a run with nothing pending re-scores the model
(`rescore_model`); each re-score records an Evaluation, the model's metric history.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import closing
from typing import TYPE_CHECKING

import pandas as pd
from sqlalchemy import func, select

from pipeline.core.db import Database
from pipeline.core.errors import DomainError
from pipeline.core.tables import FAILED, BenchmarkSpec, DatasetVersion, Evaluation
from pipeline.evaluation.batches import Batch, VersionItem
from pipeline.evaluation.comparison import EvaluationResult, evaluate_contribution
from pipeline.evaluation.datasets import (
    BenchmarkData,
    DatasetFrames,
    accepted_items,
    latest_benchmark,
    model_settings,
)
from pipeline.evaluation.jobs import normalize_trigger
from pipeline.evaluation.model_claims import fence
from pipeline.evaluation.outcomes import EvaluationOutcome
from pipeline.sandbox.errors import TrainerFailed

if TYPE_CHECKING:
    from pipeline.services import Services

log = logging.getLogger(__name__)


def guarded_rescore(
    version: str | None, score: Callable[[], EvaluationOutcome | None]
) -> EvaluationOutcome:
    """A re-score that cannot stop the rest of the run; its failure is reported in the outcome."""
    try:
        outcome = score()
    except TrainerFailed as exc:
        log.warning("re-score for %s: the model's training code failed: %s", version, exc.detail)
        return EvaluationOutcome(
            None,
            version,
            "rescore",
            status=FAILED,
            detail=f"re-score failed: the model's training code failed: {exc.summary}",
            trainer_failure=exc.describe(),
        )
    except Exception as exc:
        log.exception("re-score for %s failed", version or "the model")
        detail = exc.detail if isinstance(exc, DomainError) else type(exc).__name__
        return EvaluationOutcome(
            None, version, "rescore", status=FAILED, detail=f"re-score failed: {detail}"
        )
    if outcome is None:
        return EvaluationOutcome(None, version, "rescore", detail="no benchmark: nothing to score")
    return outcome


def rescore_on_benchmark(
    svc: Services, frames: DatasetFrames, batch: Batch, item: VersionItem
) -> EvaluationOutcome:
    """Re-score the model on the benchmark that `item` (a benchmark version) brought."""
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
        batch=batch,
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
    frames: DatasetFrames | None = None,
    batch: Batch | None = None,
) -> EvaluationOutcome | None:
    """Score the model trained on the benchmark's base data and all accepted rows; records an
    Evaluation (metric history).

    `baseline_score` is the trivial baseline (majority class or mean) and `improvement_pct`
    the model's gain over it. Returns None when the model has no benchmark. Recorded like a
    valuation: only while `batch`'s run holds the model (`model_claims.fence`).
    """
    if frames is None:
        with closing(DatasetFrames(svc)) as own:
            return rescore_model(
                svc,
                model_id,
                trigger=trigger,
                run_id=run_id,
                spec=spec,
                dataset_version_id=dataset_version_id,
                frames=own,
            )
    spec = spec or latest_benchmark(svc.db, model_id)
    if spec is None:
        log.info("model %s has no benchmark; nothing to re-score", model_id)
        return None
    # One fit, whatever the model's `paired_fits`: a re-score is the model's metric history, not
    # a payout, and the model as deployed is one fit on every row.
    task_type, estimator, _ = model_settings(svc.db, model_id)
    bench = frames.benchmark(spec)
    training = bench.training_frame(frames.many(accepted_items(svc.db, model_id)))
    result = evaluate_contribution(
        None,
        training if training is not None else pd.DataFrame(),
        bench.frame,
        task_type=task_type,
        estimator=estimator,
        trainer=frames.trainers.for_model(model_id),
        target_column=bench.target_column,
        input_columns=bench.input_columns or None,
        metric_name=bench.metric_name,
        metric_direction=bench.metric_direction,
    )
    evaluation_id = _record_rescore(
        svc,
        model_id,
        bench,
        result,
        trigger=trigger,
        run_id=run_id,
        version_id=dataset_version_id,
        batch=batch,
    )
    return EvaluationOutcome(
        evaluation_id,
        _version_name(svc, dataset_version_id),
        "rescore",
        metric_name=bench.metric_name,
        score=result.score_with,
        baseline_score=result.score_without,
        improvement_pct=result.improvement_pct,
        detail=f"{bench.metric_name} {result.score_with:.4f} trained on "
        + (
            f"{result.train_rows_with} rows ({bench.base_rows} of the owner's base data)"
            if bench.base_rows
            else f"{result.train_rows_with} accepted rows"
        ),
        base_rows=bench.base_rows,
    )


def _record_rescore(
    svc: Services,
    model_id: int,
    bench: BenchmarkData,
    result: EvaluationResult,
    *,
    trigger: str,
    run_id: str | None,
    version_id: int | None,
    batch: Batch | None,
) -> str:
    """Write the re-score's Evaluation; its id."""
    with svc.db.session() as session:
        claim, held = (batch.claim, batch.model_held) if batch is not None else (run_id, False)
        fence(session, svc, model_id, claim, strict=held)
        evaluation = Evaluation(
            model_id=model_id,
            dataset_version_id=version_id,
            benchmark_spec_id=bench.spec_id,
            trigger=normalize_trigger(trigger),
            metric_name=bench.metric_name,
            metric_direction=bench.metric_direction,
            score=result.score_with,
            baseline_score=result.score_without,
            improvement_pct=result.improvement_pct,
            run_id=run_id,
            base_rows=bench.base_rows,
        )
        session.add(evaluation)
        session.flush()
        return evaluation.id


def _version_name(svc: Services, dataset_version_id: int | None) -> str | None:
    if not dataset_version_id:
        return None
    with svc.db.session() as session:
        return session.scalar(
            select(DatasetVersion.version).where(DatasetVersion.id == dataset_version_id)
        )


def rescore_due(db: Database, model_id: int) -> bool:
    """Whether the model as it stands has not been scored yet: no re-score on its latest
    benchmark, or a valuation recorded since the latest one (its accepted rows changed)."""
    spec = latest_benchmark(db, model_id)
    if spec is None:
        return True  # the re-score says there is nothing to score
    with db.session() as session:
        last_rescore = session.scalar(
            select(func.max(Evaluation.created_at)).where(
                Evaluation.model_id == model_id,
                Evaluation.benchmark_spec_id == spec.id,
                Evaluation.valuation_id.is_(None),
            )
        )
        last_valuation = session.scalar(
            select(func.max(Evaluation.created_at)).where(
                Evaluation.model_id == model_id, Evaluation.valuation_id.is_not(None)
            )
        )
    if last_rescore is None:
        return True
    return last_valuation is not None and last_valuation > last_rescore
