"""The "without" cache (issue 18), on SQLite and PostgreSQL with the local object store.

Its key is the model's accepted state: a new accepted version, a new benchmark version or a new
trainer is a miss; an unchanged model hits, also after a restart (a new Services and store over
the same data dir), and never reads another model's entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import EVALUATING, REJECTED, REWARDED
from pipeline.evaluation.datasets import DatasetFrames, accepted_items, latest_benchmark
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.evaluation.without_cache import (
    WithoutCache,
    model_state_key,
    without_key,
    without_object_key,
)
from pipeline.rewards.ledger import wallet_rewards
from pipeline.rewards.valuation_view import valuation_view
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore
from tests.support.pipeline import (
    WALLET_A,
    add_benchmark,
    contribute,
    job,
    manifest,
    run_pipeline,
)
from tests.support.valuation import CANCER, register_frame_model, rows

FAST = {"valuation_bootstrap_resamples": 200, "enable_pii_detection": False}
BENCH = CANCER.iloc[:169]


@pytest.fixture
def svc(
    make_settings: Callable[..., Settings], db: Database, store: LocalObjectStore
) -> Iterator[Services]:
    yield Services(make_settings(**FAST), db=db, store=store)


@pytest.fixture(autouse=True)
def no_label_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # Flipped labels are what the label check quarantines; here they must reach valuation.
    monkeypatch.setattr("pipeline.checks.integrity.check_labels", lambda *_a, **_k: None)


def cancer_model(db: Database, store: LocalObjectStore, name: str = "cancer") -> int:
    model_id = register_frame_model(
        db, name, CANCER, task_type="classification", estimator="logistic_regression"
    )
    add_benchmark(
        db,
        store,
        rows(BENCH),
        model_id=model_id,
        target_column="target",
        metric_name="accuracy",
        metric_direction="higher_is_better",
    )
    return model_id


def valued(svc: Services, model_id: int, frame: Any, user: str = "alice") -> dict[str, Any]:
    """Contribute `frame` and run the pipeline; the job's status and valuation detail."""
    job_id, version = contribute(
        svc.db, svc.store, rows(frame), model_id=model_id, user=user, with_manifest=manifest()
    )
    run_pipeline(svc, version, model_id=model_id)
    row = job(svc.db, job_id)
    return {"job_id": job_id, "status": row.status, **(row.quality or {})["valuation"]}


def test_an_unchanged_model_reads_without_from_the_cache_also_after_a_restart(
    svc: Services, make_settings: Callable[..., Settings], db: Database, store: LocalObjectStore
) -> None:
    model_id = cancer_model(db, store)
    flipped = CANCER.iloc[169:269].assign(target=lambda f: 1 - f.target)
    first = valued(svc, model_id, flipped)
    assert first["status"] == REJECTED and first["without_cache"] == "miss"
    assert first["models_trained"] == 2
    # A restart: new settings, database engine and object store over the same data dir.
    with Services(make_settings(**FAST)) as restarted:
        second = valued(restarted, model_id, CANCER.iloc[269:369], user="bob")
    assert second["status"] in (EVALUATING, REWARDED)
    assert second["without_cache"] == "hit" and second["models_trained"] == 1
    assert second["score_without"] == first["score_without"]
    # The model left behind by the accepted batch is the next one's "without".
    third = valued(svc, model_id, CANCER.iloc[369:469], user="carol")
    assert third["without_cache"] == "hit" and third["models_trained"] == 1
    assert third["score_without"] == pytest.approx(second["score_with"])
    # The supplier's job view and the ledger say how the share was computed.
    view = valuation_view(job(db, first["job_id"]).quality)
    assert view is not None
    assert (view["method"], view["withoutCache"], view["modelsTrained"]) == ("exact", "miss", 2)
    paid = [e for e in wallet_rewards(db, WALLET_A)["entries"] if e["jobId"] == second["job_id"]]
    assert [(e["withoutCache"], e["sampleRows"]) for e in paid] == [("hit", 0)]


def _state(svc: Services, model_id: int, estimator: str = "logistic_regression") -> Any:
    spec = latest_benchmark(svc.db, model_id)
    assert spec is not None
    bench = DatasetFrames(svc).benchmark(spec)
    scorer = BenchmarkScorer(
        bench.frame,
        task_type="classification",
        estimator=estimator,
        target_column="target",
        metric_name="accuracy",
    )
    return model_state_key(model_id, spec, accepted_items(svc.db, model_id), scorer), scorer


@pytest.mark.parametrize("change", ["accepted version", "benchmark version", "trainer"])
def test_each_change_of_the_accepted_state_is_a_miss(
    svc: Services, db: Database, store: LocalObjectStore, change: str
) -> None:
    model_id = cancer_model(db, store)
    cache = WithoutCache(store)
    key, scorer = _state(svc, model_id)
    stored = scorer.predict(CANCER.iloc[469:569])
    cache.put(key, stored)
    hit = cache.get(key, scorer)
    assert hit is not None and np.array_equal(hit.outputs, stored.outputs)
    estimator = "logistic_regression"
    if change == "accepted version":
        # Valued against the real "without" (no accepted rows yet), not the stand-in above,
        # so that the contribution clears the payout gate and is accepted.
        store.delete(key.object_key)
        assert valued(svc, model_id, CANCER.iloc[169:269])["status"] in (EVALUATING, REWARDED)
        cache.put(key, stored)  # the old state's entry, as a run before the change left it
    elif change == "benchmark version":
        add_benchmark(
            db,
            store,
            rows(CANCER.iloc[:150]),
            model_id=model_id,
            target_column="target",
            metric_name="accuracy",
            metric_direction="higher_is_better",
        )
    else:
        estimator = "random_forest_classifier"
    new_key, new_scorer = _state(svc, model_id, estimator)
    assert new_key.digest != key.digest
    assert cache.get(new_key, new_scorer) is None


def test_one_model_never_reads_another_models_entry(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    first, other = cancer_model(db, store), cancer_model(db, store, "cancer-2")
    key, scorer = _state(svc, first)
    WithoutCache(store).put(key, scorer.predict(CANCER.iloc[469:569]))
    same_parts = without_key(other, **dict(key.parts))
    assert without_object_key(first) != without_object_key(other) == same_parts.object_key
    assert WithoutCache(store).get(same_parts, scorer) is None
    # Even an entry copied under the other model's path does not match its key.
    store.put_bytes(same_parts.object_key, store.open(key.object_key).read())
    assert WithoutCache(store).get(same_parts, scorer) is None


def test_a_corrupt_entry_is_a_miss(svc: Services, db: Database, store: LocalObjectStore) -> None:
    model_id = cancer_model(db, store)
    key, scorer = _state(svc, model_id)
    store.put_bytes(key.object_key, b"not parquet")
    assert WithoutCache(store).get(key, scorer) is None
