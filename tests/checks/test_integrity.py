"""Integrity before valuation (issue 9 §3 and §4's label poisoning), on real data.

Fingerprints and the label check are tested as pure functions on scikit-learn's bundled tables;
the pipeline step, the upload hook and the known-rows store on SQLite and PostgreSQL.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from pipeline.checks import fingerprint_files
from pipeline.checks import fingerprints as fp
from pipeline.checks.batch import run_integrity_checks
from pipeline.checks.benchmark_copies import count_benchmark_copies
from pipeline.checks.benchmark_fingerprints import (
    benchmark_fingerprint_key,
    benchmark_summary,
    model_benchmarks,
)
from pipeline.checks.disclosure import LEAKAGE_REASON
from pipeline.checks.known_rows import (
    AcceptedKeys,
    accepted_keys_key,
    known_mask,
    novel_rows,
    record_accepted_fingerprints,
)
from pipeline.checks.labels import check_labels
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import EVALUATING, REJECTED, REWARDED, RewardEntry
from pipeline.demo.churn_data import churn_benchmark_rows, churn_rows
from pipeline.demo.demo_data import DemoModel, make_demo_data
from pipeline.evaluation.datasets import accepted_items
from pipeline.models.definitions import demo_definition
from pipeline.services import Services
from pipeline.store import dataset_batches
from pipeline.store.objectstore import LocalObjectStore
from tests.support.integrity import (
    BENCHMARK_ROWS,
    bundled_frame,
    flip_labels,
    register_bundled,
    rows_of,
    with_noise,
)
from tests.support.lottery import jittered, subset
from tests.support.pipeline import (
    WALLET_A,
    WALLET_B,
    add_benchmark,
    contribute,
    job,
    manifest,
    run_pipeline,
)
from tests.support.threads import run_together

# --- fingerprints: pure ------------------------------------------------------------------------


def build(
    frame: pd.DataFrame, tmp_path: Path, *, classification: bool = True, chunk: int = 1000
) -> Path:
    out = tmp_path / f"fp-{len(list(tmp_path.iterdir()))}.bin"
    table = pa.Table.from_pandas(frame, preserve_index=False)
    fingerprint_files.build_fingerprints(
        lambda: table.to_batches(max_chunksize=chunk),
        columns=fp.fingerprint_columns(list(frame.columns), "target"),
        target="target",
        classification=classification,
        out=out,
        tmp_root=tmp_path,
    )
    return out


def copies(path: Path, query: pd.DataFrame, tolerance: float = 0.01) -> Any:
    with fingerprint_files.open_fingerprints(path) as fingerprints:
        keys = fp.frame_keys(fingerprints.scheme, query)
        return count_benchmark_copies(keys, fingerprints, tolerance=tolerance, version="v1")


def split(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    frame = bundled_frame(name)
    return frame.iloc[:BENCHMARK_ROWS].reset_index(drop=True), frame.iloc[
        BENCHMARK_ROWS:
    ].reset_index(drop=True)


def test_one_value_written_differently_is_one_canonical_value(tmp_path: Path) -> None:
    reference = pd.DataFrame(
        {"x": [1.0, 2.5, 3.0], "kind": ["Month-to-Month", "b", "c"], "target": [1, 0, 1]}
    )
    spellings = pd.DataFrame(
        {
            "x": ["1", " 1e0 ", "1.00000001"],
            "kind": [" month-to-month", "MONTH-TO-MONTH", "Ｍonth-to-month"],  # full-width M
            "target": ["1", "1.0", "True"],
        }
    )
    path = build(reference, tmp_path)
    result = copies(path, spellings)
    assert result.per_tier["exact"] == 3

    other = pd.DataFrame({"x": ["1.001"], "kind": ["month-to-month"], "target": [1]})
    assert copies(path, other).per_tier["exact"] == 0


def test_missing_values_are_one_value_however_written(tmp_path: Path) -> None:
    reference = pd.DataFrame({"x": [1.0, np.nan], "y": ["a", None], "target": [1, 0]})
    path = build(reference, tmp_path)
    query = pd.DataFrame({"x": ["NaN", "", "1"], "y": ["", "null", ""], "target": [0, 0, 0]})
    assert copies(path, query).per_tier["exact"] == 2  # both spell the reference's second row


@pytest.mark.parametrize("name", ["breast_cancer", "diabetes", "digits"])
def test_copied_benchmark_rows_are_found_exact_and_with_small_noise(
    name: str, tmp_path: Path
) -> None:
    bench, _ = split(name)
    path = build(bench, tmp_path, classification=name != "diabetes")
    copied = bench.iloc[:150]
    exact = copies(path, copied)
    assert exact.leaked and exact.copies == 150 and exact.exact_copies == 150
    for noisy in (with_noise(copied, 1e-4), with_noise(copied, 1e-4, relative=True)):
        found = copies(path, noisy)
        assert found.leaked, found
        assert found.exact_copies == 0 and found.copies >= 140


@pytest.mark.parametrize("name", ["breast_cancer", "diabetes", "wine", "digits"])
def test_disjoint_honest_rows_are_not_taken_for_copies(name: str, tmp_path: Path) -> None:
    bench, rest = split(name) if name != "wine" else (None, None)
    if name == "wine":  # 178 rows: half and half
        frame = bundled_frame(name)
        bench, rest = frame.iloc[:89], frame.iloc[89:]
    assert bench is not None and rest is not None
    path = build(bench, tmp_path, classification=name != "diabetes")
    honest = copies(path, rest)
    assert not honest.leaked
    assert honest.copies == 0 and all(count == 0 for count in honest.per_tier.values())


def test_a_dense_table_allows_chance_matches_but_still_refuses_copies(tmp_path: Path) -> None:
    # Churn rows live in a few dimensions: in a 10,000-row benchmark a coarse cell holds many
    # honest rows. The chance rate measured on the benchmark itself makes room for them.
    bench = pd.DataFrame(churn_rows(10_000, seed=1)).rename(columns={"churned": "target"})
    path = build(bench, tmp_path, chunk=3000)
    with fingerprint_files.open_fingerprints(path) as fingerprints:
        rates = dict(
            zip(fingerprints.scheme.tiers, fingerprints.summary.chance_rates(), strict=True)
        )
    assert rates["near_0.5"] > 0.3 and rates["exact"] < 0.01
    honest = pd.DataFrame(churn_rows(1000, seed=99)).rename(columns={"churned": "target"})
    result = copies(path, honest)
    assert result.per_tier["near_0.5"] > 300  # many chance matches in the coarse tier ...
    assert not result.leaked  # ... expected, so not copies
    copied = with_noise(bench.iloc[:200], 1e-4, relative=True)
    assert copies(path, copied).leaked


@pytest.mark.parametrize("seed", [1, 5, 7])
def test_demo_data_for_a_copy_of_the_demo_model_is_not_taken_for_leakage(
    seed: int, tmp_path: Path
) -> None:
    # Issue 23: `marketplace demo-data DIR --model 8` for a copy of the demo model: 276 of 1,000
    # honest rows met benchmark rows in the coarse tier, where 248 were allowed.
    model = DemoModel(
        "customer-churn-copy", "classification", "churned", demo_definition().data_spec
    )
    demo = make_demo_data(model, seed=seed)
    bench = pd.DataFrame(demo.benchmark).rename(columns={"churned": "target"})
    honest = pd.DataFrame(demo.contribution).rename(columns={"churned": "target"})
    path = build(bench, tmp_path)
    result = copies(path, honest)
    assert result.per_tier["near_0.5"] > 200  # chance coincidences of low-cardinality rows ...
    assert not result.leaked  # ... are not copies
    assert copies(path, with_noise(bench.iloc[:150], 1e-4, relative=True)).leaked


def accepted_keys_of(path: Path, accepted: pd.DataFrame) -> Any:
    with fingerprint_files.open_fingerprints(path) as fingerprints:
        keys = fp.frame_keys(fingerprints.scheme, accepted, probes=False)
        tiers = [np.unique(keys.keys(t)) for t in range(len(fingerprints.scheme.tiers))]
        return AcceptedKeys(fingerprints.scheme, len(accepted), tiers)


def known(path: Path, accepted: Any, query: pd.DataFrame) -> int:
    with fingerprint_files.open_fingerprints(path) as fingerprints:
        keys = fp.frame_keys(fingerprints.scheme, query)
        return int(known_mask(keys, accepted, fingerprints.summary).sum())


@pytest.mark.parametrize("name", ["breast_cancer", "diabetes", "churn"])
def test_jittered_resamples_of_accepted_rows_are_known_and_honest_rows_are_not(
    name: str, tmp_path: Path
) -> None:
    if name == "churn":  # dense: coarse cells hold many honest rows
        frame = pd.DataFrame(churn_rows(1500, seed=4)).rename(columns={"churned": "target"})
        bench, rest = frame.iloc[:1000], frame.iloc[1000:].reset_index(drop=True)
    else:
        bench, rest = split(name)
    path = build(bench, tmp_path, classification=name != "diabetes")
    accepted, honest = rest.iloc[:100], rest.iloc[100:200]
    keys = accepted_keys_of(path, accepted)
    rng = np.random.default_rng(0)
    resampled = jittered(accepted, "target", rng, 100)  # 0.02 standard deviations of noise
    assert known(path, keys, resampled) >= 90
    assert known(path, keys, subset(accepted, "target", rng, 60)) == 60
    assert known(path, keys, honest) == 0


def test_a_value_moved_across_a_cell_boundary_is_still_found(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    bench = pd.DataFrame({"x": rng.normal(0, 1, 500), "y": rng.normal(0, 1, 500)})
    bench["target"] = (bench["x"] > 0).astype(int)
    path = build(bench, tmp_path)
    tier = 2  # cells 0.05 standard deviations wide
    with fingerprint_files.open_fingerprints(path) as fingerprints:
        scheme = fingerprints.scheme
        cell = scheme.widths[tier - 1] * scheme.scales[0]
        z = (bench["x"] - scheme.means[0]) / cell
        above = (z - np.floor(z)).to_numpy()
        row = int(np.flatnonzero((above > 0.005) & (above < 0.05))[0])
        # The copy moves just below the boundary under its value: into the next cell down, by
        # less than PROBE_MARGIN of a cell.
        moved = bench.iloc[[row]].copy()
        moved["x"] = bench.loc[row, "x"] - (above[row] + 0.005) * cell
        keys = fp.frame_keys(scheme, moved)
        own_cell = fp.contains(fingerprints.tier_keys[tier], keys.keys(tier))
        matched = fp.match_rows(keys, fingerprints.tier_keys)
    assert not own_cell.any()  # a plain grid would miss it
    assert matched[tier].all()


def test_fingerprints_do_not_depend_on_batches_or_file_format(tmp_path: Path) -> None:
    bench = pd.DataFrame(churn_benchmark_rows(700, seed=3))
    columns = fp.fingerprint_columns(list(bench.columns), "churned")
    csv_path, parquet_path = tmp_path / "b.csv", tmp_path / "b.parquet"
    bench.to_csv(csv_path, index=False)
    pq.write_table(
        pa.Table.from_pandas(bench, preserve_index=False), parquet_path, row_group_size=64
    )
    arrays = []
    for path, file_format in ((csv_path, "csv"), (parquet_path, "parquet")):
        out = tmp_path / f"{file_format}.fp"
        summary = fingerprint_files.fingerprint_file(
            path,
            file_format,
            columns=columns,
            target="churned",
            classification=True,
            out=out,
            tmp_root=tmp_path,
        )
        assert summary.rows == 700
        with fingerprint_files.open_fingerprints(out) as fingerprints:
            arrays.append([np.array(k) for k in fingerprints.tier_keys])
            assert "split" not in fingerprints.scheme.columns
    for csv_keys, parquet_keys in zip(*arrays, strict=True):
        assert np.array_equal(csv_keys, parquet_keys)
    one_batch = build(bench.drop(columns="split").rename(columns={"churned": "target"}), tmp_path)
    many = build(
        bench.drop(columns="split").rename(columns={"churned": "target"}), tmp_path, chunk=13
    )
    with (
        fingerprint_files.open_fingerprints(one_batch) as a,
        fingerprint_files.open_fingerprints(many) as b,
    ):
        assert all(np.array_equal(x, y) for x, y in zip(a.tier_keys, b.tier_keys, strict=True))


@pytest.fixture
def small_csv_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """CSV types are guessed from the first block: make blocks small so that "late" is near."""
    monkeypatch.setattr(dataset_batches, "CSV_BLOCK_BYTES", 4096)
    monkeypatch.setattr(dataset_batches, "CSV_HEAD_BYTES", 4096)


def late_text_csv(path: Path) -> Path:
    rows = [f"{i},{i % 2}" for i in range(5_000)] + ["n/a-yet,1"]
    path.write_text("x,target\n" + "\n".join(rows) + "\n")
    return path


def test_a_csv_column_that_turns_to_text_late_is_read_again_as_text(
    tmp_path: Path, small_csv_blocks: None
) -> None:
    path = late_text_csv(tmp_path / "late.csv")
    out = tmp_path / "late.fp"
    summary = fingerprint_files.fingerprint_file(
        path,
        "csv",
        columns=("x", "target"),
        target="target",
        classification=True,
        out=out,
        tmp_root=tmp_path,
    )
    assert summary.rows == 5_001
    query = pd.DataFrame({"x": ["n/a-yet", "17"], "target": [1, 1]})
    assert copies(out, query).per_tier["exact"] == 2


def test_fingerprints_keep_keys_not_values(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {"comment": [f"secret-note-{i}" for i in range(200)], "target": [i % 2 for i in range(200)]}
    )
    data = build(frame, tmp_path).read_bytes()
    assert b"secret-note" not in data


# --- labels: pure ------------------------------------------------------------------------------


def labels(reference: pd.DataFrame, contribution: pd.DataFrame, task_type: str) -> Any:
    return check_labels(
        reference,
        contribution,
        task_type=task_type,
        estimator="logistic_regression" if task_type == "classification" else "linear_regression",
        features=[c for c in reference.columns if c != "target"],
        target="target",
        margin=0.10,
        reference_name="benchmark",
    )


def test_flipped_labels_are_quarantined_and_clean_labels_pass() -> None:
    bench, rest = split("breast_cancer")
    clean = labels(bench, rest.iloc[:150], "classification")
    poisoned = labels(bench, flip_labels(rest.iloc[:150], 0.3), "classification")
    assert clean is not None and not clean.quarantined
    assert poisoned is not None and poisoned.quarantined
    assert poisoned.disagreement > 0.25 > 0.1 > clean.disagreement
    assert poisoned.self_disagreement is not None and poisoned.self_disagreement > 0.25


def test_inverted_labels_are_quarantined_though_they_agree_with_themselves() -> None:
    bench, rest = split("breast_cancer")
    inverted = flip_labels(rest.iloc[:150], 1.0)
    report = labels(bench, inverted, "classification")
    assert report is not None and report.quarantined
    assert report.self_disagreement is not None and report.self_disagreement < 0.15


def test_regression_targets_shrunk_or_shuffled_are_quarantined_and_clean_ones_pass() -> None:
    bench, rest = split("diabetes")
    sample = rest.iloc[:150].copy()
    clean = labels(bench, sample, "regression")
    shrunk = sample.assign(
        target=sample["target"].mean() + 0.05 * (sample["target"] - sample["target"].mean())
    )
    shuffled = sample.assign(
        target=np.random.default_rng(2).permutation(sample["target"].to_numpy())
    )
    assert clean is not None and not clean.quarantined
    for poisoned in (shrunk, shuffled):
        report = labels(bench, poisoned, "regression")
        assert report is not None and report.quarantined, report


def test_too_few_rows_are_not_measured() -> None:
    bench, rest = split("breast_cancer")
    assert labels(bench, rest.iloc[:10], "classification") is None


# --- the pipeline step (SQLite and PostgreSQL) --------------------------------------------------


@pytest.fixture
def svc(settings: Settings, db: Database, store: LocalObjectStore) -> Iterator[Services]:
    yield Services(settings, db=db, store=store)


@pytest.fixture
def cancer(db: Database, store: LocalObjectStore) -> tuple[int, pd.DataFrame, pd.DataFrame]:
    """The breast-cancer model with a 250-row benchmark; (model id, benchmark, other rows)."""
    model_id, frame = register_bundled(db, "breast_cancer")
    bench = frame.iloc[:BENCHMARK_ROWS].reset_index(drop=True)
    add_benchmark(db, store, rows_of(bench), model_id=model_id, target_column="target")
    return model_id, bench, frame.iloc[BENCHMARK_ROWS:].reset_index(drop=True)


def submit(
    svc: Services,
    model_id: int,
    frame: pd.DataFrame,
    *,
    user: str = "alice",
    wallet: str = WALLET_A,
) -> str:
    job_id, version = contribute(
        svc.db,
        svc.store,
        rows_of(frame),
        model_id=model_id,
        user=user,
        with_manifest=manifest(wallet),
    )
    run_pipeline(svc, version, model_id=model_id)
    return job_id


def integrity(db: Database, job_id: str) -> dict[str, Any]:
    figures = (job(db, job_id).quality or {}).get("integrity")
    assert isinstance(figures, dict)
    return figures


def ledger_jobs(db: Database) -> set[str | None]:
    with db.session() as session:
        return {r.contribution_id for r in session.scalars(select(RewardEntry))}


def accepted_jobs(db: Database, model_id: int) -> set[str | None]:
    return {item.contribution_id for item in accepted_items(db, model_id)}


def test_benchmark_copies_are_rejected_with_the_count_and_never_trained_on(
    svc: Services, db: Database, cancer: tuple[int, pd.DataFrame, pd.DataFrame]
) -> None:
    model_id, bench, _ = cancer
    exact = submit(svc, model_id, bench.iloc[:150])
    noisy = submit(svc, model_id, with_noise(bench.iloc[100:250], 1e-4))

    for job_id in (exact, noisy):
        row = job(db, job_id)
        figures = integrity(db, job_id)
        assert row.status == REJECTED
        assert row.improvement_pct is None  # never evaluated
        assert figures["verdict"] == "benchmark leakage"
        # The submitter is told the same whatever the count; the figures stay with the owner.
        assert row.reason == LEAKAGE_REASON
        assert figures["detail"].startswith(
            f"benchmark leakage: {figures['benchmark_copies']} of 150 rows copy or nearly copy "
            "rows of the model's benchmark v1"
        )
        assert figures["benchmark_copies_allowed"] == 1
    assert integrity(db, exact)["benchmark_copies"] == 150
    assert integrity(db, exact)["exact_benchmark_copies"] == 150
    assert integrity(db, noisy)["benchmark_copies"] >= 140
    assert integrity(db, noisy)["exact_benchmark_copies"] == 0
    assert ledger_jobs(db) == set()
    assert accepted_jobs(db, model_id) == set()


def test_a_disjoint_honest_contribution_passes_to_evaluation(
    svc: Services, db: Database, cancer: tuple[int, pd.DataFrame, pd.DataFrame]
) -> None:
    model_id, _, rest = cancer
    job_id = submit(svc, model_id, rest.iloc[:150])
    figures = integrity(db, job_id)
    assert figures["verdict"] == "passed"
    assert figures["benchmark_copies"] == 0 and figures["known_rows"] == 0
    assert figures["novel_rows"] == 150 and figures["novel_share"] == 1.0
    assert figures["label_reference"] == "benchmark" and figures["label_check"] == "passed"
    assert figures["label_disagreement"] < 0.1
    assert job(db, job_id).improvement_pct is not None  # evaluated


def test_accepted_rows_again_are_already_contributed_whoever_sends_them(
    svc: Services, db: Database, cancer: tuple[int, pd.DataFrame, pd.DataFrame]
) -> None:
    model_id, _, rest = cancer
    first = submit(svc, model_id, rest.iloc[:150])
    assert job(db, first).status in (REWARDED, EVALUATING)
    assert accepted_jobs(db, model_id) == {first}

    again = submit(svc, model_id, rest.iloc[:150])
    other_user = submit(svc, model_id, rest.iloc[:150], user="bob", wallet=WALLET_B)
    noisy = submit(svc, model_id, with_noise(rest.iloc[:150], 1e-4, relative=True), user="carol")
    for job_id in (again, other_user, noisy):
        row = job(db, job_id)
        assert row.status == REJECTED, row.reason
        assert (row.reason or "").startswith("already contributed: ")
        figures = integrity(db, job_id)
        assert figures["known_rows"] >= 145 and figures["novel_share"] < 0.05
    assert (job(db, again).reason or "").startswith(
        "already contributed: 150 of 150 rows duplicate rows already accepted for this model"
    )
    assert ledger_jobs(db) <= {first}
    assert accepted_jobs(db, model_id) == {first}


def test_partially_known_rows_are_counted_and_left_out_of_valuation(
    svc: Services, db: Database, cancer: tuple[int, pd.DataFrame, pd.DataFrame]
) -> None:
    model_id, _, rest = cancer
    first = submit(svc, model_id, rest.iloc[:150])
    assert accepted_jobs(db, model_id) == {first}
    # The accepted contribution itself, measured without itself, is all new.
    assert novel_rows(svc, model_id, rest.iloc[:150], exclude_job=first).known == 0
    assert novel_rows(svc, model_id, rest.iloc[:150]).known == 150
    mixed = pd.concat([rest.iloc[75:150], rest.iloc[150:225]], ignore_index=True)
    job_id = submit(svc, model_id, mixed, user="bob", wallet=WALLET_B)

    figures = integrity(db, job_id)
    assert figures["verdict"] == "passed"
    assert figures["known_rows"] == 75 and figures["novel_rows"] == 75
    assert figures["novel_share"] == 0.5

    result = novel_rows(svc, model_id, mixed, exclude_job=job_id)
    assert (result.known, result.total, result.novel) == (75, 150, 75)
    expected = rest.iloc[150:225].reset_index(drop=True)
    assert np.allclose(result.frame.to_numpy(dtype=float), expected.to_numpy(dtype=float))


def test_flipped_labels_on_a_fresh_model_are_quarantined_and_a_clean_sample_passes(
    svc: Services, db: Database, cancer: tuple[int, pd.DataFrame, pd.DataFrame]
) -> None:
    model_id, _, rest = cancer
    poisoned = submit(svc, model_id, flip_labels(rest.iloc[:150], 0.3))
    row = job(db, poisoned)
    figures = integrity(db, poisoned)
    assert row.status == REJECTED and figures["verdict"] == "labels quarantined"
    assert figures["label_reference"] == "benchmark"  # nothing accepted yet
    assert figures["label_disagreement"] > 0.2 > 0.1 > figures["reference_disagreement"]
    assert (row.reason or "").startswith(
        f"labels quarantined: labels disagree with the current model on "
        f"{figures['label_disagreement'] * 100:.1f} % (reference "
        f"{figures['reference_disagreement'] * 100:.1f} %, benchmark)"
    )
    assert accepted_jobs(db, model_id) == set() and ledger_jobs(db) == set()

    clean = submit(svc, model_id, rest.iloc[150:300])
    assert integrity(db, clean)["verdict"] == "passed"
    assert job(db, clean).status != REJECTED or "no improvement" in (job(db, clean).reason or "")


def test_regression_copies_and_shrunk_targets_are_refused(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    model_id, frame = register_bundled(db, "diabetes")
    bench, rest = frame.iloc[:BENCHMARK_ROWS], frame.iloc[BENCHMARK_ROWS:].reset_index(drop=True)
    add_benchmark(
        db,
        store,
        rows_of(bench),
        model_id=model_id,
        target_column="target",
        metric_name="r2",
        metric_direction="higher_is_better",
    )
    copied = submit(svc, model_id, with_noise(bench.iloc[:150], 1e-4))
    sample = rest.iloc[:150]
    shrunk = submit(
        svc,
        model_id,
        sample.assign(
            target=sample["target"].mean() + 0.05 * (sample["target"] - sample["target"].mean())
        ),
    )
    assert integrity(db, copied)["verdict"] == "benchmark leakage"
    assert integrity(db, shrunk)["verdict"] == "labels quarantined"
    assert (job(db, shrunk).reason or "").startswith(
        "labels quarantined: targets (1 - R²) disagree with the current model"
    )


def test_a_benchmark_stored_without_fingerprints_is_fingerprinted_by_the_pipeline(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    _, bench_version = add_benchmark(db, store)
    key = benchmark_fingerprint_key(1, bench_version)
    assert not store.exists(key)
    job_id, version = contribute(db, store, churn_rows(200, seed=1), with_manifest=manifest())
    run_pipeline(svc, version)
    assert store.exists(key)
    assert key.startswith("integrity/1/")  # outside datasets/: no arrival
    # churn_rows(…, seed=1) are the benchmark's own rows.
    assert integrity(db, job_id)["benchmark_copies"] == 200


def test_no_benchmark_leaves_contributions_for_the_run_after_one_arrives(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    job_id, version = contribute(db, store, churn_rows(200, seed=1), with_manifest=manifest())
    run_pipeline(svc, version)
    assert job(db, job_id).status == "queued"
    _, bench = add_benchmark(db, store)
    run_pipeline(svc, bench)
    assert integrity(db, job_id)["verdict"] == "benchmark leakage"


def test_accepted_fingerprints_are_cached_once_per_version_and_agree_across_threads(
    svc: Services, db: Database, store: LocalObjectStore, settings: Settings
) -> None:
    add_benchmark(db, store)
    _, version = contribute(db, store, churn_rows(300, seed=2), with_manifest=manifest())
    run_pipeline(svc, version)
    [item] = accepted_items(db, 1)
    scheme = benchmark_summary(svc, model_benchmarks(svc, 1)[0].fingerprint_key).scheme
    key = accepted_keys_key(1, item.dataset_version_id, scheme)
    assert not store.exists(key)  # built when first needed

    repeat = pd.DataFrame(churn_rows(300, seed=2))

    def worker() -> int:
        own = Services(settings, db=db, store=store)
        record_accepted_fingerprints(own, item)
        return novel_rows(own, 1, repeat).known

    results, errors = run_together(worker, 4)
    assert not errors
    assert results == [300] * 4
    cached = np.load(io.BytesIO(store.open(key).read()))
    assert cached.shape == (300, len(scheme.tiers))


def test_integrity_checks_skip_versions_no_longer_validating(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    from pipeline.evaluation.claims import claim_batch

    add_benchmark(db, store)
    _, version = contribute(db, store, churn_rows(200, seed=1), with_manifest=manifest())
    batch = claim_batch(svc, 1, version, trigger="arrival")
    first = run_integrity_checks(svc, batch)
    assert [o.passed for o in first] == [False]
    assert run_integrity_checks(svc, batch) == []  # already rejected: nothing to check


# --- the upload hook ---------------------------------------------------------------------------


def test_benchmark_upload_fingerprints_its_rows_outside_datasets(
    client: Any,
    platform_key: Callable[..., str],
    svc: Services,
    db: Database,
    store: LocalObjectStore,
    settings: Settings,
) -> None:
    bench = pd.DataFrame(churn_benchmark_rows(300, seed=1))
    headers = {
        "Authorization": f"Bearer {platform_key(user_id='admin', scopes=['benchmarks:write'])}"
    }
    response = client.post(
        "/api/v1/benchmarks/upload/1",
        headers=headers,
        files={"file": ("bench.csv", bench.to_csv(index=False).encode())},
        data={"target_column": "churned"},
    )
    assert response.status_code == 201, response.text
    key = benchmark_fingerprint_key(1, "v1")
    assert store.exists(key)
    stored = store.open(key).read()
    summary = benchmark_summary(svc, key)
    assert summary.rows == 300 and summary.scheme.target == "churned"
    assert "split" not in summary.scheme.columns

    job_id, version = contribute(db, store, churn_rows(200, seed=1), with_manifest=manifest())
    run_pipeline(svc, version)
    assert integrity(db, job_id)["benchmark_copies"] == 200
    assert store.open(key).read() == stored  # the upload's fingerprints were used as they are


def test_the_label_reference_samples_a_csv_benchmark_whose_column_turns_to_text(
    svc: Services, db: Database, store: LocalObjectStore, small_csv_blocks: None
) -> None:
    from pipeline.checks.benchmark_fingerprints import benchmark_sample

    rows = [{"x": i, "target": i % 2} for i in range(5_000)] + [{"x": "n/a-yet", "target": 1}]
    add_benchmark(db, store, rows, target_column="target")
    [ref] = model_benchmarks(svc, 1)
    sample = benchmark_sample(svc, ref, ("x", "target"), 300)
    assert len(sample) == 300
    again = benchmark_sample(svc, ref, ("x", "target"), 300)
    assert sample.equals(again)  # seeded


def test_a_benchmark_upload_whose_fingerprinting_fails_is_stored_and_fingerprinted_later(
    client: Any,
    platform_key: Callable[..., str],
    svc: Services,
    db: Database,
    store: LocalObjectStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pipeline.intake.uploads

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("simulated")

    monkeypatch.setattr(pipeline.intake.uploads, "fingerprint_received", broken)
    bench = pd.DataFrame(churn_benchmark_rows(300, seed=1))
    key = platform_key(user_id="admin", scopes=["benchmarks:write"])
    response = client.post(
        "/api/v1/benchmarks/upload/1",
        headers={"Authorization": f"Bearer {key}"},
        files={"file": ("bench.csv", bench.to_csv(index=False).encode())},
        data={"target_column": "churned"},
    )
    assert response.status_code == 201, response.text
    fingerprints = benchmark_fingerprint_key(1, "v1")
    assert not store.exists(fingerprints)
    job_id, version = contribute(db, store, churn_rows(200, seed=1), with_manifest=manifest())
    run_pipeline(svc, version)
    assert store.exists(fingerprints)
    assert integrity(db, job_id)["verdict"] == "benchmark leakage"


def test_on_s3_benchmark_and_accepted_fingerprints_are_stored_and_read_back(
    s3_settings: Settings, db: Database
) -> None:
    from pipeline.store.objectstore import object_store_from_settings

    store = object_store_from_settings(s3_settings)
    svc = Services(s3_settings, db=db, store=store)
    _, bench = add_benchmark(db, store)
    first, version = contribute(db, store, churn_rows(300, seed=2), with_manifest=manifest())
    run_pipeline(svc, version)
    assert store.exists(benchmark_fingerprint_key(1, bench))
    assert integrity(db, first)["verdict"] == "passed"
    assert accepted_jobs(db, 1) == {first}

    copied, version = contribute(db, store, churn_rows(200, seed=1), with_manifest=manifest())
    again, version_again = contribute(db, store, churn_rows(300, seed=2), user="bob")
    run_pipeline(svc, version_again)  # one batch: both
    assert integrity(db, copied)["verdict"] == "benchmark leakage"
    assert integrity(db, again)["verdict"] == "already contributed"
    [item] = accepted_items(db, 1)
    scheme = benchmark_summary(svc, benchmark_fingerprint_key(1, bench)).scheme
    assert store.exists(accepted_keys_key(1, item.dataset_version_id, scheme))
