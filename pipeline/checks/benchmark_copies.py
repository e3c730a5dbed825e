"""Counting a contribution's copies of a benchmark's rows, per fingerprint tier.

The verdict (`pipeline.checks.integrity`) compares each tier's copies with what chance allows
there (`pipeline.checks.fingerprints.chance_allowance`); for classification, rows count whatever
their label (`AnyLabel`), so the verdict never tells a prober a leaked row's true label.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from pipeline.checks.fingerprint_files import Fingerprints
from pipeline.checks.fingerprints import (
    RowKeys,
    Scheme,
    chance_allowance,
    frame_keys,
    match_rows,
    target_codes,
)


@dataclass(frozen=True)
class Leakage:
    """How many rows of a contribution copy one benchmark version's rows."""

    rows: int
    benchmark_version: str
    tier: str  # the tier with the largest excess over chance
    copies: int
    expected: float
    allowed: float
    exact_copies: int
    per_tier: dict[str, int] = field(default_factory=dict)

    @property
    def leaked(self) -> bool:
        return self.copies > self.allowed


@dataclass(frozen=True)
class AnyLabel:
    """Matching a classification benchmark's rows whatever their label.

    A row of the benchmark sent with another label is still a row of the benchmark; were it
    not counted, the verdict would tell a prober each leaked row's true label (send it with
    each label in turn and see which one is refused). Matches under any of `labels` (the
    benchmark's classes) count, and the chance rates are those of the benchmark's own rows
    matching another of its rows under any label.
    """

    own: np.ndarray  # each query row's own target code
    labels: np.ndarray  # target codes of the benchmark's classes
    chance_rates: list[float]  # per tier


def match_any_label(
    keys: RowKeys, tier_keys: Sequence[np.ndarray], any_label: AnyLabel
) -> list[np.ndarray]:
    """Per tier, which query rows match a reference row with their own label or another."""
    matched = match_rows(keys, tier_keys)
    for label in any_label.labels:
        relabelled = match_rows(keys.with_target(any_label.own, label), tier_keys)
        matched = [a | b for a, b in zip(matched, relabelled, strict=True)]
    return matched


def any_label_chance_rates(
    fingerprints: Fingerprints, sample: pd.DataFrame, labels: np.ndarray
) -> list[float]:
    """Per tier: the stored chance rate plus the share of a sample of the benchmark's own rows
    that match a row of the benchmark under another label (an upper bound of their union)."""
    stored = fingerprints.summary.chance_rates()
    if sample.empty:
        return stored
    scheme = fingerprints.scheme
    keys = frame_keys(scheme, sample)
    own = target_codes(scheme, sample)
    other = [np.zeros(len(sample), dtype=bool) for _ in stored]
    for label in labels:
        matched = match_rows(keys.with_target(own, label), fingerprints.tier_keys)
        other = [o | (m & (own != label)) for o, m in zip(other, matched, strict=True)]
    return [min(1.0, rate + float(o.mean())) for rate, o in zip(stored, other, strict=True)]


def count_benchmark_copies(
    keys: RowKeys,
    fingerprints: Fingerprints,
    *,
    tolerance: float,
    version: str,
    any_label: AnyLabel | None = None,
) -> Leakage:
    """Copies per tier; the verdict uses the tier whose copies most exceed its allowance."""
    if any_label is None:
        matched = match_rows(keys, fingerprints.tier_keys)
        rates = fingerprints.summary.chance_rates()
    else:
        matched = match_any_label(keys, fingerprints.tier_keys, any_label)
        rates = any_label.chance_rates
    rows = keys.rows
    best: Leakage | None = None
    per_tier = {}
    for tier, hits, rate in zip(fingerprints.summary.tiers, matched, rates, strict=True):
        copies = int(hits.sum())
        per_tier[tier.name] = copies
        candidate = Leakage(
            rows,
            version,
            tier.name,
            copies,
            rows * rate,
            chance_allowance(rows, rate, tolerance),
            int(matched[0].sum()),
        )
        if best is None or (candidate.copies - candidate.allowed) > (best.copies - best.allowed):
            best = candidate
    assert best is not None
    return replace(best, per_tier=per_tier)


def copy_rule(tier: str, scheme: Scheme) -> str:
    """The matching rule of a tier, in words."""
    if tier == "exact":
        return "identical values to about 7 significant digits"
    width = float(tier.removeprefix("near_"))
    return f"values within {width * scheme.margin:g} to {width:g} standard deviations per column"
