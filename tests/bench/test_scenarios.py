"""The payout bench's scenario of the loan demo's owner trainer (`bench/_scenarios.py`): what it
trains on, and that its references are fresh only under their own digest."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench import _payout, _references, _scenarios
from pipeline.models import estimators


def test_the_loan_scenario_trains_the_owners_code_on_an_owner_who_never_lent_to_late_payers() -> (
    None
):
    scorer, base, contributions = _scenarios.scenario(300, 2, 20, _scenarios.LOAN_TRAINER)
    assert scorer.recipe is None and scorer.trainer is not None
    assert scorer.trainer.folder == _scenarios.FOLDER
    assert (scorer.trainer.folder / "train.py").is_file()
    assert len(base) == 300 and base["late_payments"].max() < _scenarios.LATE_GAP
    assert all(len(p.frame) == 1000 for p in contributions)
    late = sum(int((p.frame["late_payments"] >= _scenarios.LATE_GAP).sum()) for p in contributions)
    assert late > 100  # what the contributions bring
    assert len(scorer.bench) == 10_000


def test_a_catalog_estimator_keeps_the_churn_scenario() -> None:
    scorer, base, _ = _scenarios.scenario(300, 2, 20, "logistic_regression")
    assert scorer.trainer is None and "contract" in base.columns
    assert (base["contract"] != "two-year").all()


def test_loan_references_are_fresh_only_under_the_loan_digest(tmp_path: Path) -> None:
    churn, loan = _references.code_digest(), _scenarios.digest_of(_scenarios.LOAN_TRAINER)
    assert loan != churn and _scenarios.digest_of("random_forest_classifier") == churn
    scores = {frozenset(): [0.5, 0.5], frozenset({0}): [0.6, 0.6]}
    for code in (churn, loan):
        reference = _references.Reference(
            {"estimator": _scenarios.LOAN_TRAINER, "accepted": 300, "players": 1, "seed": 0},
            ["c0"],
            {c: np.asarray(s) for c, s in scores.items()},
            0.5,
            higher_is_better=True,
            code=code,
        )
        _references.save(reference, tmp_path)
        found, status = _scenarios.load(_scenarios.LOAN_TRAINER, 300, 1, 0, tmp_path)
        assert (status, found is not None) == (
            ("fresh", True) if code == loan else ("stale", False)
        )


def test_the_owners_trainer_has_no_seed_of_the_services_to_change() -> None:
    """The owner's code draws its own seed: no "seed" perturbation, and the catalog is left
    alone; a catalog forest's seed is changed and restored."""
    assert not _payout.has_seed(_scenarios.LOAN_TRAINER)
    assert _payout.has_seed("random_forest_classifier")
    before = dict(estimators.CATALOG)
    with _payout.other_seed(_scenarios.LOAN_TRAINER):
        assert before == estimators.CATALOG
    with _payout.other_seed("random_forest_classifier"):
        forest = estimators.CATALOG["random_forest_classifier"]
        assert forest.fixed["random_state"] == _payout.OTHER_SEED
    assert before == estimators.CATALOG
