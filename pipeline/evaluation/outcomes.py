"""What a scoring run reports per dataset version: one evaluation recorded (a contribution
measured, or a re-score), or why none was."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


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
    base_rows: int | None = None  # the owner's base training data the model was trained on
    # The owner's view of a failure of the model's training code (reason and stderr tail);
    # never part of a contributor's job reason.
    trainer_failure: str | None = None
    # How the shares were computed (pipeline.rewards.valuation): method, accepted rows the
    # shares' game trained on, "without" from the cache or trained, models trained.
    valuation_method: str | None = None
    sample_rows: int | None = None
    without_cache: str | None = None
    models_trained: int | None = None
    # The pool's band over the model's paired fits, as text ("not measured (one fit)" with
    # one), and the model's paired fits K (pipeline.rewards.stability).
    stability_band: str | None = None
    paired_fits: int | None = None
    # Why the payout of an accepted contribution is held for the operator (the reference check
    # of a valuation by the owner's code, pipeline.rewards.holds); None: not held.
    payout_hold: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
