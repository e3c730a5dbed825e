"""Scoring of a batch: evaluation of each contribution, and re-scores of the model.

A contribution that passed the checks (`validating`) moves to `evaluating` and is trained and
scored on the model's newest benchmark with and without its rows: with an improvement > 0 it
stays `evaluating` with "rewards pending" (`pipeline.payouts` pays it), otherwise it is
`rejected` for no improvement; an unexpected error moves it to `failed`. A contribution of a
model without any BenchmarkSpec goes back to `queued` with a reason and is evaluated by the
first run after a benchmark arrives. A benchmark version, a scheduled run or a run with nothing
pending re-scores the model trained on all accepted rows (`rescore_model`).

Accepted training rows are the rows of contributions that improved the model: status
`rewarded`, or `evaluating` with a positive improvement (evaluated earlier in the same run,
rewards pending). Rows rejected for no improvement are not training data.

This module knows nothing of Dagster; `assets/` wraps it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, or_, select, update

from pipeline.batches import (
    EVALUATING,
    FAILED,
    QUEUED,
    REJECTED,
    REWARDED,
    VALIDATING,
    Batch,
    Services,
    VersionItem,
    fail_job,
    job_status,
    load_frame,
    normalize_trigger,
    transition,
    version_item,
)
from pipeline.db import Database
from pipeline.errors import DomainError, InvalidInput
from pipeline.tables import (
    BenchmarkSpec,
    Contribution,
    DatasetVersion,
    Evaluation,
    Model,
    utcnow,
)

if TYPE_CHECKING:
    import pandas as pd

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
    db: Database, model_id: int, exclude_job: str | None = None
) -> list[VersionItem]:
    """Versions whose rows train the model (see the module docstring)."""
    with db.session() as session:
        rows = session.execute(
            select(Contribution.id, DatasetVersion)
            .join(DatasetVersion, Contribution.dataset_version_id == DatasetVersion.id)
            .where(
                Contribution.model_id == model_id,
                or_(
                    Contribution.status == REWARDED,
                    and_(Contribution.status == EVALUATING, Contribution.improvement_pct > 0),
                ),
            )
            .order_by(DatasetVersion.version_number)
        ).all()
    return [version_item(dv, contribution_id=job) for job, dv in rows if job != exclude_job]


def evaluate_batch(svc: Services, batch: Batch) -> list[EvaluationOutcome]:
    """Evaluate the batch in version order, then re-score the model when the batch asks for it."""
    frames = _Frames(svc)
    outcomes: list[EvaluationOutcome] = []
    for item in batch.items:
        if item.benchmark_spec_id is not None:
            outcomes.append(
                _guarded_rescore(item.version, partial(_rescore_on, svc, frames, batch, item))
            )
        elif item.is_contribution and job_status(svc.db, item.contribution_id or "") == VALIDATING:
            outcomes.append(_evaluate_contribution(svc, frames, batch, item))
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


def _evaluate_contribution(
    svc: Services, frames: _Frames, batch: Batch, item: VersionItem
) -> EvaluationOutcome:
    from pipeline.evaluation import evaluate_contribution

    job_id = item.contribution_id or ""
    spec = latest_benchmark(svc.db, batch.model_id)
    if spec is None:
        reason = "checks passed; waiting for a benchmark: the model has no BenchmarkSpec yet"
        transition(svc.db, job_id, (VALIDATING,), QUEUED, reason=reason)
        return EvaluationOutcome(None, item.version, "contribution", status=QUEUED, detail=reason)
    if not transition(svc.db, job_id, (VALIDATING,), EVALUATING):
        return EvaluationOutcome(None, item.version, "contribution", detail="claimed elsewhere")
    try:
        task_type, estimator = _model_settings(svc.db, batch.model_id)
        bench = frames.benchmark(spec)
        base_items = accepted_items(svc.db, batch.model_id, exclude_job=job_id)
        base = _concat(frames.many(base_items))
        result = evaluate_contribution(
            base,
            frames.version(item),
            bench.frame,
            task_type=task_type,
            estimator=estimator,
            target_column=bench.target_column,
            input_columns=bench.input_columns or None,
            metric_name=bench.metric_name,
            metric_direction=bench.metric_direction,
        )
    except DomainError as exc:
        reason = f"evaluation refused the data: {exc.detail}"
        transition(svc.db, job_id, (EVALUATING,), REJECTED, reason=reason)
        return EvaluationOutcome(None, item.version, "contribution", status=REJECTED, detail=reason)
    except Exception as exc:
        fail_job(svc.db, item, "evaluation", exc)
        return EvaluationOutcome(
            None, item.version, "contribution", status=FAILED, detail=str(type(exc).__name__)
        )
    change = (
        f"{bench.metric_name} {result.score_without:.4f} → {result.score_with:.4f} "
        f"({result.improvement_pct:+.2f} %)"
    )
    with svc.db.session() as session:
        evaluation = Evaluation(
            model_id=batch.model_id,
            dataset_version_id=item.dataset_version_id,
            benchmark_spec_id=spec.id,
            trigger=batch.trigger,
            metric_name=bench.metric_name,
            metric_direction=bench.metric_direction,
            score=result.score_with,
            baseline_score=result.score_without,
            improvement_pct=result.improvement_pct,
            run_id=batch.run_id,
        )
        session.add(evaluation)
        session.flush()
        evaluation_id = evaluation.id
        session.execute(
            update(Contribution)
            .where(Contribution.id == job_id)
            .values(improvement_pct=result.improvement_pct, updated_at=utcnow())
        )
    if result.improvement_pct > 0:
        status, detail = EVALUATING, f"improved {change}; rewards pending"
        transition(svc.db, job_id, (EVALUATING,), EVALUATING, reason=detail)
    else:
        status, detail = REJECTED, f"no improvement: {change}"
        transition(svc.db, job_id, (EVALUATING,), REJECTED, reason=detail)
    return EvaluationOutcome(
        evaluation_id,
        item.version,
        "contribution",
        metric_name=bench.metric_name,
        score=result.score_with,
        baseline_score=result.score_without,
        improvement_pct=result.improvement_pct,
        status=status,
        detail=detail,
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
    from pipeline.evaluation import evaluate_contribution

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
