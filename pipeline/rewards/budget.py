"""Try budgets: every valuation decision is a test, and a supplier's tests share one error budget.

A batch's improvement is paid when its bootstrap lower bound clears the model's minimum
meaningful improvement δ (`Model.min_improvement_pct`). One such test passes noise with a
small probability; a supplier who may try again and again would win that lottery. So each
try of a supplier on a model is one test of a sequence, with its own level (false-pay
probability) set by an online rule in the spirit of LORD++ (Javanmard & Montanari 2018):

    level(n) = W · γ(n),   γ(n) = 1 / (n (n + 1)),   Σ γ(n) = 1

where W is `REWARD_TRY_BUDGET` (0.05) and n counts the tries of the supplier's *stream* since
that stream's last accepted try (the first try after one is n = 1: level W/2 = 0.025, the
one-sided level of the 95 % interval the gate used before). A rejected try spends: the next
is tested at level(n + 1). An accepted try earns the budget back: the stream starts again at
n = 1. On pure noise a stream pays falsely between two accepted tries with probability at most
Σ level(n) = W, so its expected false payouts are at most W / (1 − W), however many tries it
makes; each accepted try buys at most that much again (the false share of paid tries stays near
W, as with online FDR control). The tries of one batch in one stream share a level and count as
one test: the batch's pool is tested once.

A try is paid when both the batch's percentile interval (`VALUATION_CONFIDENCE_LEVEL`) and
the normal bootstrap bound `pool − z(1 − level(n)) · se` lie above δ.

**The supplier.** A try belongs to its submitter (`user:ID`) and to every wallet its manifest
pays (`wallet:0x…`); tries sharing a user or a wallet are one supplier, transitively (a user's
wallets share a budget, and so do the users of one wallet). A supplier with an accepted try
on the model has its own stream. One without (every fresh account) draws on the model's shared
*newcomer* stream: all tries of never-accepted suppliers of the model count in it. A Sybil
opening fresh accounts therefore gets no fresh budget: its accounts spend the one newcomer
budget together, which starts again only when some newcomer's try is accepted.

Tries are rows of `valuation_tries` (and their identities), written in the transaction of the
verdicts (`pipeline.rewards.batch_valuation`), so budgets survive restarts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from pipeline.core.tables import (
    Contribution,
    DatasetVersion,
    Model,
    ValuationTry,
    ValuationTryIdentity,
)
from pipeline.rewards.manifest_sources import resolve_manifest
from pipeline.rewards.manifests import recipients
from pipeline.rewards.valuation import BatchValuation

if TYPE_CHECKING:
    from pipeline.services import Services

OWN = "own"
NEWCOMER = "newcomer"
# Why a player was rejected: its try's bound did not clear δ at the level of its budget.
BUDGET = "budget"
# Tries shown ahead in the job view.
AHEAD = 3
# Links followed from a supplier's identities to their tries' other identities.
_MAX_LINK_ROUNDS = 20


def try_level(budget: float, n: int) -> float:
    """The false-pay probability allowed to the n-th try since the stream's last accepted one."""
    return budget / (n * (n + 1))


def bound_at(pool_pct: float, se: float, level: float) -> float:
    """The one-sided normal bootstrap lower bound of the improvement at `level`, in percent."""
    if not math.isfinite(se):
        return -math.inf
    return pool_pct - NormalDist().inv_cdf(1.0 - level) * se


@dataclass(frozen=True)
class Supplier:
    """Who made a try: the contribution, its submitter and the wallets it pays."""

    key: str  # contribution id
    submitter_id: str
    wallets: tuple[str, ...] = ()

    @property
    def identities(self) -> set[str]:
        return {f"user:{self.submitter_id}", *(f"wallet:{w.lower()}" for w in self.wallets)}


@dataclass(frozen=True)
class Standing:
    """Where a try stands in its stream's budget."""

    stream: str  # OWN | NEWCOMER
    try_number: int


@dataclass
class Decision:
    """A try's test: its level, the bound it had to clear, and the verdict."""

    supplier: Supplier
    standing: Standing
    level: float
    bound_pct: float | None
    min_improvement_pct: float
    se: float
    accepted: bool
    ahead: list[dict[str, float]] = field(default_factory=list)

    def view(self) -> dict[str, Any]:
        """The job's `quality["budget"]` (the job view's `valuation.budget`, as stored): the
        figures and the sentence a supplier reads. No benchmark value is in it."""
        return {
            "stream": self.standing.stream,
            "tryNumber": self.standing.try_number,
            "level": self.level,
            "confidencePct": round(100.0 * (1.0 - self.level), 3),
            "boundPct": self.bound_pct,
            "minImprovementPct": self.min_improvement_pct,
            "accepted": self.accepted,
            "next": self.ahead,
            "summary": self.summary(),
        }

    def summary(self) -> str:
        """What the budget means for the supplier's next submissions, in plain words."""
        place = (
            "your tries since your last paid one"
            if self.standing.stream == OWN
            else "the tries of suppliers not yet paid on this model (yours included)"
        )
        counted = f"This was try {self.standing.try_number} of {place}"
        if not self.ahead:
            return counted + "."
        first, last = self.ahead[0], self.ahead[-1]
        confidences = f"{first['confidencePct']:g} to {last['confidencePct']:g} % confidence"
        restart = (
            "a paid submission restores the budget."
            if self.standing.stream == OWN
            else "once one is paid, your own budget starts in full."
        )
        if not (math.isfinite(self.se) and self.se > 0):
            return (
                f"{counted}. Your next {len(self.ahead)} submissions to this model must each "
                f"show a gain above the model's minimum of {self.min_improvement_pct:+.2f} % "
                f"with {confidences} (rising with each rejection) to be paid; {restart}"
            )
        gains = ", ".join(f"{a['minGainPct']:+.2f} %" for a in self.ahead)
        return (
            f"{counted}. Your next {len(self.ahead)} submissions to this model must show at "
            f"least {first['minGainPct']:+.2f} % to be paid ({gains} in turn if each is "
            f"rejected: {confidences} that the gain clears the model's minimum of "
            f"{self.min_improvement_pct:+.2f} %, for a contribution measured as precisely as "
            f"this one, ±{self.se:.2f} %); {restart}"
        )


def _ahead(
    budget: float, next_number: int, se: float, min_improvement: float
) -> list[dict[str, float]]:
    ahead = []
    for n in range(next_number, next_number + AHEAD):
        level = try_level(budget, n)
        gain = min_improvement + NormalDist().inv_cdf(1.0 - level) * (se if se > 0 else 0.0)
        ahead.append(
            {
                "tryNumber": n,
                "confidencePct": round(100.0 * (1.0 - level), 3),
                "minGainPct": round(gain, 2),
            }
        )
    return ahead


# --- reading the tries -------------------------------------------------------------------------


def linked_tries(session: Session, model_id: int, identities: Iterable[str]) -> list[ValuationTry]:
    """The model's tries made by any of `identities` or by identities linked to them, in order."""
    seen: set[str] = set()
    frontier = set(identities)
    try_ids: set[int] = set()
    for _ in range(_MAX_LINK_ROUNDS):
        if not frontier:
            break
        seen |= frontier
        found = set(
            session.scalars(
                select(ValuationTryIdentity.try_id).where(
                    ValuationTryIdentity.model_id == model_id,
                    ValuationTryIdentity.identity.in_(sorted(frontier)),
                )
            )
        )
        new = found - try_ids
        if not new:
            break
        try_ids |= new
        linked = set(
            session.scalars(
                select(ValuationTryIdentity.identity).where(
                    ValuationTryIdentity.try_id.in_(sorted(new))
                )
            )
        )
        frontier = linked - seen
    if not try_ids:
        return []
    return list(
        session.scalars(
            select(ValuationTry)
            .where(ValuationTry.id.in_(sorted(try_ids)))
            .order_by(ValuationTry.id)
        )
    )


def _since_last_accepted(tries: Sequence[ValuationTry]) -> int:
    """Tests failed since the last accepted one; the tries of one valuation are one test."""
    tests: dict[str, bool] = {}
    for row in tries:
        key = row.valuation_id or str(row.id)
        tests[key] = tests.get(key, False) or row.accepted
    count = 0
    for accepted in tests.values():
        count = 0 if accepted else count + 1
    return count


def standing_of(session: Session, model_id: int, supplier: Supplier) -> Standing:
    """The stream a supplier's next try is tested in, and its place there (batch aside)."""
    own = linked_tries(session, model_id, supplier.identities)
    if any(row.accepted for row in own):
        return Standing(OWN, 1 + _since_last_accepted(own))
    newcomer = list(
        session.scalars(
            select(ValuationTry)
            .where(ValuationTry.model_id == model_id, ValuationTry.stream == NEWCOMER)
            .order_by(ValuationTry.id)
        )
    )
    return Standing(NEWCOMER, 1 + _since_last_accepted(newcomer))


def suppliers_of(svc: Services, keys: Sequence[str]) -> list[Supplier]:
    """Each contribution's submitter and the wallets its manifest pays (none when unusable)."""
    suppliers = []
    for key in keys:
        with svc.db.session() as session:
            job = session.get(Contribution, key)
            dv = session.get(DatasetVersion, job.dataset_version_id) if job else None
        if job is None:
            continue
        wallets: tuple[str, ...] = ()
        if dv is not None:
            manifest, _, _ = resolve_manifest(svc, job, dv)
            if manifest is not None:
                wallets = tuple(sorted({w.lower() for w, _ in recipients(manifest)}))
        suppliers.append(Supplier(key, job.submitter_id, wallets))
    return suppliers


# --- one batch ---------------------------------------------------------------------------------


@dataclass
class TryGate:
    """The budget test of every try of one batch: prepared before recording, applied, written."""

    model_id: int
    budget: float
    min_improvement_pct: float
    standings: dict[str, tuple[Supplier, Standing]]
    decisions: dict[str, Decision] = field(default_factory=dict)

    @classmethod
    def prepare(cls, svc: Services, model_id: int, keys: Sequence[str]) -> TryGate:
        """Read each supplier's standing. The batch's pool is tested once per stream: tries of
        one stream in the batch share its level, and count as one test."""
        suppliers = suppliers_of(svc, sorted(keys))
        with svc.db.session() as session:
            model = session.get(Model, model_id)
            minimum = float(model.min_improvement_pct) if model is not None else 0.0
            standings = {
                supplier.key: (supplier, standing_of(session, model_id, supplier))
                for supplier in suppliers
            }
        return cls(model_id, svc.settings.reward_try_budget, minimum, standings)

    def apply(self, valuation: BatchValuation) -> dict[str, Decision]:
        """Decide each try; accepted players whose bound misses δ at their level are rejected."""
        interval = valuation.interval
        se = interval.se if interval is not None else math.nan
        for key, (supplier, standing) in self.standings.items():
            level = try_level(self.budget, standing.try_number)
            bound = None
            accepted = False
            if interval is not None and valuation.accepted:
                bound = bound_at(valuation.pool_pct, se, level)
                accepted = (
                    key in valuation.accepted
                    and interval.low > self.min_improvement_pct
                    and bound > self.min_improvement_pct
                )
            if key in valuation.accepted and not accepted:
                valuation.accepted.remove(key)
                valuation.rejected[key] = BUDGET
            self.decisions[key] = Decision(
                supplier,
                standing,
                level,
                None if bound is None or not math.isfinite(bound) else bound,
                self.min_improvement_pct,
                se,
                accepted,
                []
                if accepted
                else _ahead(self.budget, standing.try_number + 1, se, self.min_improvement_pct),
            )
        return self.decisions

    def record(self, session: Session, valuation_id: str) -> None:
        """Write the batch's tries (in the caller's transaction, with the verdicts)."""
        for key, decision in self.decisions.items():
            row = ValuationTry(
                model_id=self.model_id,
                valuation_id=valuation_id,
                contribution_id=key,
                submitter_id=decision.supplier.submitter_id,
                stream=decision.standing.stream,
                try_number=decision.standing.try_number,
                level=decision.level,
                bound_pct=decision.bound_pct,
                min_improvement_pct=decision.min_improvement_pct,
                accepted=decision.accepted,
            )
            session.add(row)
            session.flush()
            for identity in sorted(decision.supplier.identities):
                session.add(
                    ValuationTryIdentity(try_id=row.id, identity=identity, model_id=self.model_id)
                )


def budget_reason(valuation: BatchValuation, decision: Decision) -> str:
    """Why a try the budget rejected is not paid: the bound it missed, in plain words."""
    interval = valuation.interval
    described = interval.describe() if interval is not None else ""
    bound = f"{decision.bound_pct:+.2f} %" if decision.bound_pct is not None else "not measurable"
    return (
        f"not paid: {valuation.metric_name} {valuation.score_without:.4f} → "
        f"{valuation.score_with:.4f} ({valuation.pool_pct:+.2f} %, {described}); at "
        f"{100.0 * (1.0 - decision.level):.3g} % confidence the gain is at least {bound}, not "
        f"above the model's minimum of {decision.min_improvement_pct:+.2f} %; not trained on"
    )
