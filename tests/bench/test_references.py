"""The expected-game references of issue 35 (`bench/_references.py`) and the payout bench's
faithfulness figures against them (`bench/_payout_faithfulness.py`), on a tiny scenario."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from bench import _payout_faithfulness, _references
from pipeline.demo.churn_data import churn_rows
from pipeline.evaluation.metrics import Predictions
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.valuation import Player
from tests.bench.valuations import paid_batch

FITS = 4


class RecordingScorer(BenchmarkScorer):
    """Remembers the length and the paired fit (its seed) of every training frame."""

    lengths: list[int]
    seeds: list[int]

    def predict_fit(self, train_df: pd.DataFrame, fit: int) -> Predictions:
        self.lengths.append(len(train_df))
        self.seeds.append(fit)
        return super().predict_fit(train_df, fit)


@pytest.fixture(scope="module")
def tiny() -> dict[str, Any]:
    pool = pd.DataFrame(churn_rows(600, seed=5))
    base = pool[pool["contract"] != "two-year"].iloc[:300].reset_index(drop=True)
    players = [Player(f"c{i}", pd.DataFrame(churn_rows(150, seed=40 + i))) for i in range(2)]
    scorer = RecordingScorer(
        pd.DataFrame(churn_rows(400, seed=1)),
        task_type="classification",
        estimator="logistic_regression",
        target_column="churned",
        metric_name="accuracy",
    )
    scorer.lengths, scorer.seeds = [], []
    scores = _references.coalition_scores(scorer, base, players, FITS, workers=1)
    reference = _references.Reference(
        {"estimator": "logistic_regression", "accepted": 300, "players": 2, "seed": 0},
        [p.key for p in players],
        scores,
        scorer.floor,
        higher_is_better=True,
        code="digest",
    )
    masks = _references.subsample_masks(scorer, base, FITS)
    return {"reference": reference, "scorer": scorer, "masks": masks, "players": players}


def test_each_fit_keeps_a_keyed_subsample_of_the_accepted_rows_and_every_contribution_row(
    tiny: dict[str, Any],
) -> None:
    masks, players = tiny["masks"], tiny["players"]
    assert all(0.8 < m.mean() < 0.97 for m in masks)
    assert len({m.tobytes() for m in masks}) == FITS  # the fits' subsamples differ
    expected = [
        int(masks[k].sum()) + sum(players[i].rows for i in c)
        for c in _references.all_coalitions(2)
        for k in range(FITS)
    ]
    assert tiny["scorer"].lengths == expected
    # Fit k draws one seed of its own in every coalition, none a deployed paired fit's.
    seeds = [_references.REFERENCE_FIT + k for _ in range(4) for k in range(FITS)]
    assert tiny["scorer"].seeds == seeds


def test_fractions_add_up_over_the_paid_players_and_halves_are_their_fits_games(
    tiny: dict[str, Any],
) -> None:
    reference = tiny["reference"]
    split = reference.split()
    assert split.pool > 0
    assert split.fractions.sum() == pytest.approx(1.0)
    assert (split.fractions >= 0).all()
    halves = [reference.halves(np.array(a)) for a in ((0, 1), (0, 2), (0, 3))]
    for half, fits in zip(halves[0], ([0, 1], [2, 3]), strict=True):
        alone = _references.Reference(
            reference.scenario,
            reference.keys,
            {c: s[fits] for c, s in reference.scores.items()},
            reference.metric_floor,
            reference.higher_is_better,
            reference.code,
        )
        assert np.allclose(half.fractions, alone.split().fractions)
        assert half.pool == pytest.approx(alone.split().pool)
        without = np.mean(reference.scores[frozenset()][fits])
        full = frozenset({0, 1})
        gain = (np.mean(reference.scores[full][fits]) - without) / max(without, 1e-12) * 100
        assert alone.value(slice(None))(full) == pytest.approx(gain)
    # Four fits halve three ways, each once: the floors are the mean over the three.
    assert [a.tolist() for a in reference.halvings()] == [[0, 1], [0, 2], [0, 3]]
    floor_split, floor_pool = reference.floors()
    splits = [np.max(np.abs(a.fractions - b.fractions)) * 100 for a, b in halves]
    pools = [abs(a.pool - b.pool) / split.pool * 100 for a, b in halves]
    assert floor_split == pytest.approx(np.mean(splits))
    assert floor_pool == pytest.approx(np.mean(pools))
    assert len({round(p, 9) for p in pools}) > 1  # a single halving would be one of them


def test_sixteen_fits_are_halved_by_a_seeded_sample(tiny: dict[str, Any]) -> None:
    reference = tiny["reference"]
    sixteen = dataclasses.replace(
        reference, scores={c: np.tile(s, 4) for c, s in reference.scores.items()}
    )
    halvings = sixteen.halvings()
    assert len(halvings) == _references.HALVINGS  # of the 6,435 there are
    assert all(len(a) == 8 and len(set(a.tolist())) == 8 for a in halvings)
    assert [a.tolist() for a in halvings] == [a.tolist() for a in sixteen.halvings()]


def test_a_reference_survives_its_json(tiny: dict[str, Any], tmp_path: Path) -> None:
    reference = tiny["reference"]
    path = _references.save(reference, tmp_path)
    back = _references.Reference.from_json(json.loads(path.read_text()))
    assert back.scores.keys() == reference.scores.keys()
    assert all(np.array_equal(back.scores[c], s) for c, s in reference.scores.items())
    assert np.array_equal(back.split().fractions, reference.split().fractions)
    assert back.floors() == reference.floors()
    assert json.loads(path.read_text())["fits"] == FITS


def test_a_reference_made_by_other_code_is_stale(tiny: dict[str, Any], tmp_path: Path) -> None:
    root = tmp_path / "code"
    for name in _references.SOURCES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(_references.ROOT / name, root / name)
    before = _references.code_digest(root)
    assert before == _references.code_digest()
    scorer_source = root / "pipeline/evaluation/scorer.py"
    scorer_source.write_text(scorer_source.read_text() + "\n# changed\n")
    after = _references.code_digest(root)
    assert after != before

    stored = tmp_path / "references"
    tiny["reference"].code = before
    try:
        _references.save(tiny["reference"], stored)
    finally:
        tiny["reference"].code = "digest"
    found, status = _references.load("logistic_regression", 300, 2, 0, stored, before)
    assert status == "fresh" and found is not None
    assert _references.load("logistic_regression", 300, 2, 0, stored, after) == (None, "stale")
    assert _references.load("logistic_regression", 300, 4, 0, stored, before) == (None, "missing")


def test_faithfulness_is_zero_for_the_reference_and_large_when_a_share_moves(
    tiny: dict[str, Any],
) -> None:
    reference = tiny["reference"]
    split = reference.split()
    same = paid_batch(dict(zip(reference.keys, split.fractions * split.pool, strict=True)))
    found = _payout_faithfulness.figures(same, reference)
    assert found["faithful_split"] == pytest.approx(0.0, abs=1e-9)
    assert found["faithful_pool"] == pytest.approx(0.0, abs=1e-9)
    assert found["split_goal"] >= _payout_faithfulness.SPLIT_GOAL

    moved = paid_batch(dict(zip(reference.keys, split.fractions[::-1] * split.pool, strict=True)))
    figures = _payout_faithfulness.figures(moved, reference)
    spread = abs(split.fractions[0] - split.fractions[1]) * 100
    assert figures["faithful_split"] == pytest.approx(spread)
    assert figures["faithful_split"] > figures["split_goal"]

    rows: list[dict[str, Any]] = [
        {"estimator": "e", "accepted": 300, "players": 2, "seed": s} for s in (0, 1)
    ]
    rows[0]["faithful"], rows[1]["faithful"] = found, figures
    lines, ratio = _payout_faithfulness.summary(rows)
    assert lines[0].startswith(f"payout_e_300_faithful_split_pct_of_pool: {spread:.2f}")
    assert ratio == pytest.approx(spread / figures["split_goal"])


def test_without_a_reference_the_case_says_which_command_makes_it(
    tiny: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{"estimator": "no_such_estimator", "accepted": 300, "players": 2, "seed": 0}]
    _payout_faithfulness.attach(rows, paid_batch({"c0": 1.0, "c1": 1.0}))
    assert rows[0]["faithful"] is None
    assert "python bench/expected_game.py --estimators no_such_estimator" in capsys.readouterr().out
    lines, ratio = _payout_faithfulness.summary(rows)
    assert ratio == 0.0 and "no fresh reference" in lines[0]
