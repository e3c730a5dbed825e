"""Scoring of a batch: re-scores for its benchmarks, valuation of its contributions together,
and a re-score of the model when the batch asks for one.

Contributions are valued by `pipeline.rewards.batch_valuation`, re-scores recorded by
`pipeline.evaluation.rescore`; the data both read is `pipeline.evaluation.datasets`.

This module knows nothing of Dagster; `assets/` wraps it.
"""

from __future__ import annotations

from contextlib import closing
from functools import partial
from typing import TYPE_CHECKING

from pipeline.core.tables import VALIDATING
from pipeline.evaluation.batches import Batch
from pipeline.evaluation.datasets import DatasetFrames
from pipeline.evaluation.jobs import job_status
from pipeline.evaluation.outcomes import EvaluationOutcome
from pipeline.evaluation.rescore import guarded_rescore, rescore_model, rescore_on_benchmark
from pipeline.evaluation.trainers import record_trainer_failure
from pipeline.rewards.batch_valuation import value_contributions

if TYPE_CHECKING:
    from pipeline.sandbox.runner import TrainerRunner
    from pipeline.services import Services


def evaluate_batch(
    svc: Services, batch: Batch, runner: TrainerRunner | None = None
) -> list[EvaluationOutcome]:
    """Re-score for the batch's benchmarks, value its contributions together, then re-score
    when the batch asks for it.

    A model with the owner's training code runs it through `runner` (Dagster's Pipes runner
    in the evaluation asset; a plain subprocess by default); the owner's view of its last
    failure is kept on the model, cleared by a step that trained it without failing.
    """
    with closing(DatasetFrames(svc, runner)) as frames:
        outcomes = _evaluate(svc, batch, frames)
        if frames.trainers.uses_trainer(batch.model_id):
            failures = [o.trainer_failure for o in outcomes if o.trainer_failure]
            scored = any(o.evaluation_id for o in outcomes)
            if failures or scored:
                record_trainer_failure(svc, batch.model_id, failures[0] if failures else None)
    return outcomes


def _evaluate(svc: Services, batch: Batch, frames: DatasetFrames) -> list[EvaluationOutcome]:
    outcomes = [
        guarded_rescore(item.version, partial(rescore_on_benchmark, svc, frames, batch, item))
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
        outcomes.extend(value_contributions(svc, frames, batch, pending))
    if batch.rescore:
        outcomes.append(
            guarded_rescore(
                None,
                lambda: rescore_model(
                    svc,
                    batch.model_id,
                    trigger=batch.trigger,
                    run_id=batch.run_id,
                    frames=frames,
                    batch=batch,
                ),
            )
        )
    return outcomes
