"""Paired fits (issue 35): a model of `paired_fits` K is fitted K times per training frame, fit
k on the rows whose keyed draw for k keeps them, and its benchmark predictions are the K fits'
stacked (`Predictions.copies`). One fit is the scorer as it was. Small real data (scikit-learn's
breast cancer set)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pipeline.core.errors import InvalidInput
from pipeline.evaluation import without_cache
from pipeline.evaluation.metrics import Predictions, copy_scores, metric_score, stack_copies
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.evaluation.without_cache import (
    WithoutCache,
    _encode,
    recipe_digest,
    without_key,
)
from pipeline.models.paired_fits import (
    MAX_PAIRED_FITS,
    MIN_FOLDS,
    fit_seed,
    folds,
    paired_mask,
)
from pipeline.models.row_keys import row_keys
from pipeline.rewards.interval import improvement_interval
from pipeline.sandbox.outcome import TrainerOutput
from pipeline.store.objectstore import LocalObjectStore
from tests.support.valuation import CANCER, shuffled

BENCH, REST = CANCER.iloc[:120], CANCER.iloc[120:].reset_index(drop=True)
TRAIN = REST.iloc[:240]
HGB = "hist_gradient_boosting_classifier"


def _scorer(
    fits: int | None = None, estimator: str | None = HGB, **options: Any
) -> BenchmarkScorer:
    extra: dict[str, Any] = {} if fits is None else {"paired_fits": fits}
    return BenchmarkScorer(
        BENCH,
        task_type="classification",
        estimator=estimator,
        target_column="target",
        metric_name=options.pop("metric_name", "roc_auc"),
        **extra,
        **options,
    )


def _block(predictions: Predictions, k: int) -> np.ndarray:
    rows = len(BENCH)
    return np.asarray(predictions.outputs[k * rows : (k + 1) * rows])


def test_one_fit_is_the_default_and_trains_on_every_row() -> None:
    """`paired_fits` 1 is what a model without it gets: one fit on every row (not on a fold's
    complement), the same cache key and the same cache object."""
    plain, one = _scorer().predict(TRAIN), _scorer(1).predict(TRAIN)
    assert one.copies == plain.copies == 1 and len(one.y_true) == len(BENCH)
    subsample = TRAIN[paired_mask(row_keys(TRAIN), 0, 1)]
    assert len(subsample) < len(TRAIN)
    assert not np.array_equal(one.outputs, _scorer(1).predict(subsample).outputs)
    assert np.array_equal(one.outputs, plain.outputs) and np.array_equal(one.y_true, plain.y_true)
    assert recipe_digest(_scorer(1)) == recipe_digest(_scorer())
    key = without_key(3, recipe=recipe_digest(_scorer()))
    assert _encode(one, key) == _encode(plain, key)  # the cache object, byte for byte


def test_a_new_row_key_scheme_makes_every_cached_without_a_miss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Row keys decide training order, a forest's bootstraps and the folds: a "without" cached
    under another scheme was trained on other draws, so it is not this model's."""
    before = recipe_digest(_scorer()), recipe_digest(_scorer(4))
    monkeypatch.setattr(without_cache, "KEY_SCHEME", "row keys 3")
    assert recipe_digest(_scorer()) != before[0] and recipe_digest(_scorer(4)) != before[1]


def test_a_new_paired_scheme_misses_only_paired_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """A "without" of paired fits drawn by another scheme (rows or seeds) is not this model's;
    a model of one fit draws no seeds per fit, so its cache stays."""
    one, four = recipe_digest(_scorer()), recipe_digest(_scorer(4))
    monkeypatch.setattr(without_cache, "PAIRED_SCHEME", "another")
    assert recipe_digest(_scorer()) == one and recipe_digest(_scorer(4)) != four


def test_each_paired_fit_of_a_forest_draws_its_own_seed() -> None:
    """With one seed for all K fits a forest's fits draw the same features and bootstraps for
    each tree, so their errors move together and the band understates the spread. Fit k is a
    plain fit of its subsample under its own seed; another catalog seed changes every fit's."""
    forest = "random_forest_classifier"
    stacked = _scorer(4, estimator=forest).predict(TRAIN)
    keys = row_keys(TRAIN)
    plain = _scorer(estimator=forest)
    differs = []
    for k in range(4):
        sub = TRAIN[paired_mask(keys, k, 4)]
        assert np.array_equal(_block(stacked, k), plain._predict_rows(sub, fit=k).outputs)
        differs.append(not np.array_equal(_block(stacked, k), plain.predict(sub).outputs))
    assert all(differs)  # no fit keeps the catalog's seed
    seeds = [fit_seed(0, k) for k in range(MAX_PAIRED_FITS)]
    assert len(set(seeds)) == MAX_PAIRED_FITS
    assert not set(seeds) & {fit_seed(1, k) for k in range(MAX_PAIRED_FITS)}


@pytest.mark.parametrize("fits", [0, MAX_PAIRED_FITS + 1, 2.5, "4", True])
def test_paired_fits_out_of_range_are_refused(fits: Any) -> None:
    with pytest.raises(InvalidInput, match="paired_fits"):
        _scorer(fits)


def test_each_block_is_a_plain_fit_on_its_keyed_subsample() -> None:
    """Boosting without early stopping draws nothing from its seed: each block is the plain
    fit of its subsample (a forest's fits also draw their own seeds, tested below)."""
    stacked = _scorer(4).predict(TRAIN)
    assert stacked.copies == 4 and stacked.outputs.shape == (4 * len(BENCH), 2)
    assert np.array_equal(stacked.y_true, np.tile(BENCH.target.to_numpy(), 4))
    keys = row_keys(TRAIN)
    plain = _scorer()
    scores = copy_scores(stacked)
    for k in range(4):
        kept = paired_mask(keys, k, 4)
        assert 0.8 < kept.mean() < 0.97  # all but one fold of 10
        alone = plain.predict(TRAIN[kept])
        assert np.array_equal(_block(stacked, k), alone.outputs)
        assert scores[k] == metric_score(alone)


@pytest.mark.parametrize("fits", [2, 4, 10, 16])
def test_no_row_can_be_left_out_of_more_than_one_fit(fits: int) -> None:
    """The keys are public, so a supplier can grind a row's digits for any draw: with folds no
    row is left out of two fits, so none can be hidden from every fit (never valued, yet
    accepted), and each fit keeps all but one fold."""
    rng = np.random.default_rng(7)
    ground = pd.DataFrame({"x": rng.random(50_000), "target": rng.integers(0, 2, 50_000)})
    keys = row_keys(ground)
    masks = np.column_stack([paired_mask(keys, k, fits) for k in range(fits)])
    assert masks.sum(axis=1).min() == fits - 1
    assert folds(fits) == max(fits, MIN_FOLDS)
    kept = masks.mean(axis=0)
    assert np.allclose(kept, 1 - 1 / folds(fits), atol=0.01), kept


def test_a_contribution_filling_a_column_the_accepted_rows_leave_empty_keeps_the_pairing() -> None:
    """Fit k of "with" and of "without" leave out the same accepted rows even when the
    contribution fills an optional column every accepted row leaves empty, or turns an integer
    column into floats: a row's key is its own values'."""
    trainer = _RecordingTrainer()
    scorer = _scorer(3, estimator=None, trainer=trainer)  # type: ignore[arg-type]
    base = TRAIN.iloc[:200].copy()
    base["optional"] = np.nan
    base["count"] = np.arange(200)
    filling = TRAIN.iloc[200:203].copy()
    filling["optional"] = [1.0, 2.0, 3.0]
    filling["count"] = [0.5, 1.5, 2.5]
    scorer.bench = scorer.bench.assign(optional=0.0, count=0)
    scorer.predict(base)
    scorer.predict(pd.concat([base, filling], ignore_index=True))
    mean_radius = "mean radius"
    for k in range(3):
        without_rows = set(trainer.seen[k][mean_radius])
        with_rows = set(trainer.seen[3 + k][mean_radius]) & set(base[mean_radius])
        assert with_rows == without_rows, k


def test_reordered_rows_give_the_same_fits() -> None:
    first = _scorer(4).predict(TRAIN)
    again = _scorer(4).predict(shuffled(TRAIN, seed=3))
    assert np.array_equal(first.outputs, again.outputs)


def test_one_more_row_changes_only_the_fits_that_include_it() -> None:
    keys = row_keys(REST)
    masks = np.column_stack([paired_mask(keys, k, 4) for k in range(4)])
    # A row outside TRAIN that some fits keep and some leave out.
    extra = next(i for i in range(240, len(REST)) if 0 < masks[i].sum() < 4)
    before = _scorer(4).predict(TRAIN)
    after = _scorer(4).predict(pd.concat([TRAIN, REST.iloc[[extra]]], ignore_index=True))
    for k in range(4):
        same = np.array_equal(_block(before, k), _block(after, k))
        assert same == (not masks[extra, k]), k


@dataclass
class _RecordingTrainer:
    """The owner's training code, stood in for: a majority vote per fit, recording its rows."""

    entry: str = "train.py"
    sha256: str = "0" * 64
    seen: list[pd.DataFrame] = field(default_factory=list)

    def predict(self, train: pd.DataFrame, features: pd.DataFrame, **_: Any) -> TrainerOutput:
        self.seen.append(train)
        share = float(train["target"].mean())
        values = np.tile([1.0 - share, share], (len(features), 1))
        return TrainerOutput(values, np.array([0, 1]))


def test_the_owners_trainer_runs_once_per_fit_and_leaves_the_same_rows_out() -> None:
    """Fit k of "without" and of "with" see the same accepted rows: they differ only by the
    contribution's rows that fit k keeps."""
    trainer = _RecordingTrainer()
    scorer = _scorer(3, estimator=None, trainer=trainer)  # type: ignore[arg-type]
    base, contribution = TRAIN.iloc[:160], TRAIN.iloc[160:]
    without = scorer.predict(base)
    with_ = scorer.predict(pd.concat([base, contribution], ignore_index=True))
    assert without.copies == with_.copies == 3 and len(trainer.seen) == 6
    base_keys = set(row_keys(base).tolist())
    for k in range(3):
        without_rows = set(row_keys(trainer.seen[k]).tolist())
        with_rows = set(row_keys(trainer.seen[3 + k]).tolist())
        assert with_rows & base_keys == without_rows
        kept = paired_mask(row_keys(contribution), k, 3)
        assert with_rows - base_keys == set(row_keys(contribution)[kept].tolist())
        assert trainer.seen[k].equals(trainer.seen[k].iloc[np.argsort(row_keys(trainer.seen[k]))])


def test_an_empty_or_one_class_subsample_gets_the_trivial_baseline() -> None:
    empty = _scorer(3).predict(pd.DataFrame())
    assert empty.copies == 3 and np.array_equal(empty.outputs, np.tile(_block(empty, 0), (3, 1)))
    one_class = TRAIN[TRAIN.target == 1].iloc[:30]
    found = _scorer(3, metric_name="accuracy").predict(one_class)
    assert found.copies == 3 and set(found.outputs.tolist()) == {1}


def test_the_bootstrap_resamples_benchmark_rows_jointly_over_copies() -> None:
    """K copies of the same predictions are the same interval as one copy (a drawn row counts
    in every copy); drawn as K·n independent rows it would be about √K narrower."""
    options: dict[str, Any] = {
        "higher_is_better": True,
        "denominator": 0.5,
        "resamples": 400,
        "level": 0.95,
    }
    for metric in ("accuracy", "roc_auc"):
        scorer = _scorer(metric_name=metric)
        without, with_ = scorer.predict(TRAIN.iloc[:40]), scorer.predict(TRAIN)
        one = improvement_interval(without, with_, **options)
        four = improvement_interval(
            stack_copies([without] * 4), stack_copies([with_] * 4), **options
        )
        assert four.low == pytest.approx(one.low) and four.high == pytest.approx(one.high)
        assert four.se == pytest.approx(one.se)
    with pytest.raises(ValueError, match="paired fits"):
        improvement_interval(without, stack_copies([with_] * 2), **options)


def test_the_cache_keeps_copies_and_misses_on_another_count(tmp_path: Path) -> None:
    cache = WithoutCache(LocalObjectStore(tmp_path))
    four = _scorer(4)
    stacked = four.predict(TRAIN)
    key = without_key(7, recipe=recipe_digest(four))
    assert cache.put(key, stacked)
    back = cache.get(key, four)
    assert back is not None and back.copies == 4
    assert np.array_equal(back.outputs, stacked.outputs)
    assert np.array_equal(back.y_true, stacked.y_true)
    assert back.classes == stacked.classes
    # Another K is another recipe; an entry whose copies are not the scorer's is a miss.
    assert recipe_digest(_scorer(2)) != recipe_digest(four) != recipe_digest(_scorer(1))
    assert cache.get(key, _scorer(2)) is None
    assert cache.get(key, _scorer(1)) is None
    assert cache.put(key, replace(stacked, copies=1, y_true=stacked.y_true))
    assert cache.get(key, four) is None
