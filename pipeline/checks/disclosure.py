"""What each audience is told of a contribution's integrity check (docs/integrity.md).

The integrity check compares a contribution with the model's hidden benchmark. Exact figures
(how many rows match, in which tier, how many exactly) would make it an oracle: send benchmark
rows with guessed labels, or subsets of candidate rows, and read which ones match. So:

- the **submitter** (job view, the wallet's reward entries, the CLI) gets a coarse verdict
  (`contains rows of the benchmark`), the rows' novelty against accepted data (which their reward
  depends on) and the label check's outcome, never a count of benchmark matches; and a supplier
  whose contributions to a model were found to contain benchmark rows
  `INTEGRITY_LEAK_VERDICTS_PER_DAY` times in 24 hours may not contribute to that model again
  until the oldest of them is a day old (429), which bounds how many verdicts a prober gets;
- the **model's owner and the operators** keep every figure: `quality["integrity"]` in the
  database with the detailed reason in `detail`, the Dagster UI (asset `integrity_report`, its
  checks), and the owner's `GET /api/v1/models/{model_id}/contributions/{jobId}/integrity`.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select

from pipeline.core.db import Database
from pipeline.core.errors import NotFound, RateLimited
from pipeline.core.tables import REJECTED, Contribution, utcnow

LEAKAGE = "benchmark leakage"
# The job's `reason` for a contribution containing benchmark rows: the same whatever the count.
LEAKAGE_REASON = (
    "contains rows of the model's benchmark: nothing is paid and the rows are not used for training"
)
SUBMITTER_VERDICTS = {LEAKAGE: "contains rows of the benchmark"}
# The integrity figures a submitter sees; everything else stays with the owner and operators.
SUBMITTER_FIELDS = ("rows", "known_rows", "novel_rows", "novel_share", "label_check")
LEAK_WINDOW = timedelta(hours=24)


def submitter_integrity(figures: dict[str, Any] | None) -> dict[str, Any] | None:
    """The submitter's view of a job's `quality["integrity"]`: no benchmark figures."""
    if not figures:
        return figures
    view: dict[str, Any] = {}
    if "verdict" in figures:
        view["verdict"] = SUBMITTER_VERDICTS.get(str(figures["verdict"]), figures["verdict"])
    view.update({name: figures[name] for name in SUBMITTER_FIELDS if name in figures})
    return view


def submitter_quality(quality: dict[str, Any] | None) -> dict[str, Any] | None:
    """A job's `quality` as its submitter reads it: the integrity figures coarse."""
    if not quality or "integrity" not in quality:
        return quality
    return {**quality, "integrity": submitter_integrity(quality["integrity"])}


def require_leak_allowance(db: Database, submitter_id: str, model_id: int, per_day: int) -> None:
    """RateLimited (429) while the supplier's last day holds `per_day` leakage verdicts."""
    since = utcnow() - LEAK_WINDOW
    with db.session() as session:
        count, oldest = session.execute(
            select(func.count(), func.min(Contribution.created_at)).where(
                Contribution.submitter_id == submitter_id,
                Contribution.model_id == model_id,
                Contribution.status == REJECTED,
                Contribution.reason == LEAKAGE_REASON,
                Contribution.created_at > since,
            )
        ).one()
    if count < per_day or oldest is None:
        return
    wait = max(1, math.ceil((oldest + LEAK_WINDOW - utcnow()).total_seconds()))
    raise RateLimited(
        f"{count} of your contributions to model {model_id} in the last 24 hours contained rows "
        f"of its benchmark; you may contribute to it again in {wait} seconds",
        retry_after=wait,
    )


def owner_integrity(db: Database, model_id: int, job_id: str) -> dict[str, Any]:
    """Every integrity figure of a model's contribution, for the model's owner (NotFound)."""
    with db.session() as session:
        job = session.get(Contribution, job_id)
        if job is None or job.model_id != model_id:
            raise NotFound(f"no contribution {job_id} for model {model_id}")
        return {
            "jobId": job.id,
            "modelId": job.model_id,
            "submitterId": job.submitter_id,
            "status": job.status,
            "reason": job.reason,
            "integrity": (job.quality or {}).get("integrity"),
        }
