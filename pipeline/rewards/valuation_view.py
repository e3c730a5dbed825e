"""The job view's `valuation`: what a supplier sees of its contribution's valuation."""

from __future__ import annotations

from typing import Any

from pipeline.checks.disclosure import submitter_integrity
from pipeline.rewards.stability import band_view


def valuation_view(quality: dict[str, Any] | None) -> dict[str, Any] | None:
    """The job view's `valuation`: pool, share, interval and integrity counts of a job.

    Read from the job's `quality` JSON (`valuation` written by
    `pipeline.rewards.batch_valuation`, `integrity` by the integrity check, `reward` by
    `pipeline.rewards.payouts`); None before valuation.
    """
    quality = quality or {}
    valuation = quality.get("valuation")
    if not valuation:
        return None
    interval = valuation.get("interval")
    reward = quality.get("reward") or {}
    return {
        "valuationId": valuation.get("valuation_id"),
        "accepted": valuation.get("accepted"),
        "metricName": valuation.get("metric"),
        "scoreWithout": valuation.get("score_without"),
        "scoreWith": valuation.get("score_with"),
        "poolPct": valuation.get("pool_pct"),
        "sharePct": valuation.get("share_pct"),
        "interval": (
            {k: interval[k] for k in ("low", "high", "level", "resamples")} if interval else None
        ),
        "method": valuation.get("method"),
        "batchSize": valuation.get("batch_size"),
        "batchRows": valuation.get("batch_rows"),
        "valuedRows": valuation.get("valued_rows"),
        "baseRows": valuation.get("base_rows"),
        "sampleRows": valuation.get("sample_rows"),
        "withoutCache": valuation.get("without_cache"),
        "modelsTrained": valuation.get("models_trained"),
        # The pool's band over the model's paired fits; null with one fit or before bands were
        # kept (`pipeline.rewards.stability`).
        "stabilityBand": band_view(valuation.get("stability")),
        "pairedFits": valuation.get("paired_fits"),
        "tokensEarned": reward.get("total_tokens"),
        "cap": reward.get("cap"),
        "integrity": submitter_integrity(quality.get("integrity")),
        "budget": quality.get("budget"),  # pipeline.rewards.budget.Decision.view
    }
