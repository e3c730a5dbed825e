"""Benchmark: the payout lottery. Information-free tries by one supplier, honest contributions,
and the copy rules' false positives, through the real pipeline on real data.

    python bench/lottery.py                  # 200 tries, about 5 minutes on 2 idle cores
    python bench/lottery.py --tries 60

Runs in this process on a temp SQLite store (no HTTP: the chain the Dagster assets run, as
tests/support/pipeline.run_pipeline calls it: claim, quality, integrity, valuation with the
try budget, payout). The label check is off (`check_labels` reports "not measured"): it costs
most of a run and the rows tried here carry labels it would pass anyway. Three models: the
demo churn model, scikit-learn's breast cancer (logistic regression, accuracy) and diabetes
(linear regression, r2), each with a benchmark and one accepted contribution.

1. One supplier ("mallory", three wallets in turn) sends `--tries` information-free
   contributions (tests/support/lottery.py: jittered resamples of accepted rows, random
   subsets of them, rows drawn from the training distribution and labelled by the model),
   over the three models in turn.
2. The honest cases of the valuation tests, each on a fresh model: they must still be paid.
   Then the bar an honest newcomer meets on each attacked model (what the attack cost others).
3. The leakage and known-row rules on honest samples (pure functions): demo data for the
   demo model and for a copy of it (data-spec generator) over 10 seeds, and random halves of
   scikit-learn's breast cancer, diabetes, wine and digits over 10 seeds.

Prints `figure: value` lines and, last, `ratio: X` = noise payouts / tries (goal <= 0.005).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.checks import fingerprint_files, integrity
from pipeline.checks import fingerprints as fp
from pipeline.checks.benchmark_copies import count_benchmark_copies
from pipeline.checks.fingerprint_files import Fingerprints
from pipeline.checks.known_rows import AcceptedKeys, known_mask
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import RowValidationFailed
from pipeline.core.migrate import upgrade
from pipeline.core.tables import REWARDED
from pipeline.demo.churn_data import churn_benchmark_rows, churn_rows
from pipeline.demo.demo_data import DemoModel, make_demo_data
from pipeline.models.definitions import demo_definition
from pipeline.models.registry import register_model
from pipeline.rewards.budget import Supplier, standing_of, try_level
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore
from tests.support.integrity import bundled_frame
from tests.support.lottery import KINDS, information_free
from tests.support.pipeline import add_benchmark, contribute, job, manifest, run_pipeline
from tests.support.valuation import CANCER, DIABETES, register_frame_model, rows

WALLETS = ["0x" + c * 40 for c in "234"]
ROWS_PER_TRY = 100
SEEDS = range(1, 11)


@dataclass
class Case:
    """A model under attack: its accepted rows and how to train on them."""

    name: str
    model_id: int
    accepted: pd.DataFrame
    target: str
    task_type: str
    estimator: str


def world(folder: Path) -> Services:
    url = f"sqlite:///{folder}/marketplace.db"
    upgrade(url)
    settings = Settings(
        marketplace_data_dir=folder / "data", database_url=url, enable_pii_detection=False
    )
    return Services(settings, db=Database(url), store=LocalObjectStore(settings.objects_dir))


def paid_run(svc: Services, frame_rows: list[dict[str, Any]], model_id: int, **who: Any) -> Any:
    """Contribute rows and run the pipeline over them; the job row after."""
    job_id, version = contribute(svc.db, svc.store, frame_rows, model_id=model_id, **who)
    run_pipeline(svc, version, model_id=model_id)
    return job(svc.db, job_id)


def frame_model(svc: Services, name: str, frame: pd.DataFrame, bench: int, metric: str) -> int:
    classification = metric == "accuracy"
    model_id = register_frame_model(
        svc.db,
        name,
        frame,
        task_type="classification" if classification else "regression",
        estimator="logistic_regression" if classification else "linear_regression",
    )
    add_benchmark(
        svc.db,
        svc.store,
        rows(frame.iloc[:bench]),
        model_id=model_id,
        target_column="target",
        metric_name=metric,
        metric_direction="higher_is_better",
    )
    return model_id


def churn_model(svc: Services, name: str, bench: list[dict[str, Any]] | None = None) -> int:
    """A copy of the demo model named `name`, with a benchmark (default: 1,000 churn rows)."""
    definition = demo_definition().model_copy(update={"name": name})
    with svc.db.session() as session:
        model_id = register_model(session, definition).id
    add_benchmark(svc.db, svc.store, bench or churn_benchmark_rows(1000), model_id=model_id)
    return model_id


def attacked_cases(svc: Services) -> list[Case]:
    """The three models, each with one accepted (paid) contribution."""
    cancer = frame_model(svc, "lottery-cancer", CANCER, 169, "accuracy")
    diabetes = frame_model(svc, "lottery-diabetes", DIABETES, 192, "r2")
    churn = churn_model(svc, "lottery-churn")
    accepted = {
        cancer: CANCER.iloc[169:269].reset_index(drop=True),
        diabetes: DIABETES.iloc[192:292].reset_index(drop=True),
        churn: pd.DataFrame(churn_rows(300, seed=2)),
    }
    for model_id, frame in accepted.items():
        data = rows(frame) if model_id != churn else frame.to_dict("records")
        seed_wallet = manifest("0x" + "5" * 40)
        row = paid_run(svc, data, model_id, user="seed-supplier", with_manifest=seed_wallet)
        assert row.status == REWARDED, row.reason
    return [
        Case("cancer", cancer, accepted[cancer], "target", "classification", "logistic_regression"),
        Case("diabetes", diabetes, accepted[diabetes], "target", "regression", "linear_regression"),
        Case("churn", churn, accepted[churn], "churned", "classification", "logistic_regression"),
    ]


def records(frame: pd.DataFrame, case: Case) -> list[dict[str, Any]]:
    if case.name == "churn":
        out = frame.to_dict("records")
        return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in out]
    return rows(frame)


def play_noise(svc: Services, cases: list[Case], tries: int) -> dict[str, Any]:
    rng = np.random.default_rng(2026)
    outcomes: Counter[str] = Counter()
    paid_tokens = 0.0
    paid = 0
    started = time.perf_counter()
    for i in range(tries):
        case = cases[i % len(cases)]
        kind = KINDS[(i // len(cases)) % len(KINDS)]
        frame = information_free(
            kind, case.accepted, case.target, rng, ROWS_PER_TRY,
            task_type=case.task_type, estimator=case.estimator,
        )  # fmt: skip
        try:
            row = paid_run(svc, records(frame, case), case.model_id, user="mallory",
                           with_manifest=manifest(WALLETS[i % len(WALLETS)]))  # fmt: skip
        except RowValidationFailed:
            outcomes[f"{kind}:refused_by_the_data_spec"] += 1
            continue
        outcomes[f"{kind}:{_stage(row)}"] += 1
        if row.tokens:
            paid += 1
            paid_tokens += row.tokens
    return {
        "paid": paid,
        "tokens": paid_tokens,
        "outcomes": dict(sorted(outcomes.items())),
        "seconds": time.perf_counter() - started,
    }


def _stage(row: Any) -> str:
    reason = row.reason or ""
    if row.status == REWARDED:
        return "paid"
    for prefix in ("already contributed", "benchmark leakage", "nothing to value", "not paid",
                   "within noise", "no improvement", "labels quarantined"):  # fmt: skip
        if reason.startswith(prefix):
            return prefix.replace(" ", "_")
    return f"other_{row.status}"


# --- honest contributions ----------------------------------------------------------------------


def honest_cases(svc: Services) -> list[tuple[str, bool]]:
    """The honest contributions of the valuation tests, each on a fresh model."""
    results: list[tuple[str, bool]] = []
    cancer = frame_model(svc, "honest-cancer", CANCER, 169, "accuracy")
    row = paid_run(svc, rows(CANCER.iloc[169:269]), cancer, with_manifest=manifest())
    results.append(("cancer 100 rows", row.status == REWARDED))

    diabetes = frame_model(svc, "honest-diabetes", DIABETES, 192, "r2")
    row = paid_run(svc, rows(DIABETES.iloc[192:342]), diabetes, with_manifest=manifest())
    results.append(("diabetes 150 rows", row.status == REWARDED))

    pieces = frame_model(svc, "honest-pieces", CANCER, 169, "accuracy")
    jobs = [
        contribute(svc.db, svc.store, rows(CANCER.iloc[169 + i * 100 : 269 + i * 100]),
                   model_id=pieces, user=f"supplier-{i}", with_manifest=manifest(WALLETS[i % 3]))
        for i in range(4)
    ]  # fmt: skip
    run_pipeline(svc, jobs[-1][1], model_id=pieces)
    results += [(f"cancer piece {i} of 4", job(svc.db, j).status == REWARDED)
                for i, (j, _) in enumerate(jobs)]  # fmt: skip

    mixed = frame_model(svc, "honest-with-flipped", CANCER, 169, "accuracy")
    good_a, _ = contribute(svc.db, svc.store, rows(CANCER.iloc[169:269]), model_id=mixed,
                           with_manifest=manifest(WALLETS[0]))  # fmt: skip
    flipped = [{**r, "target": 1 - r["target"]} for r in rows(CANCER.iloc[369:469])]
    contribute(svc.db, svc.store, flipped, model_id=mixed, with_manifest=manifest(WALLETS[1]))
    good_b, last = contribute(svc.db, svc.store, rows(CANCER.iloc[269:369]), model_id=mixed,
                              user="bob", with_manifest=manifest(WALLETS[2]))  # fmt: skip
    run_pipeline(svc, last, model_id=mixed)
    results.append(("cancer good beside flipped (a)", job(svc.db, good_a).status == REWARDED))
    results.append(("cancer good beside flipped (b)", job(svc.db, good_b).status == REWARDED))

    # `marketplace demo-data DIR` for the demo model, and `--model 8` for a copy of it under
    # another name (its rows then come from the data-spec generator): benchmark, then rows.
    spec = demo_definition().data_spec
    for name in ("customer-churn", "customer-churn-copy"):
        demo = make_demo_data(DemoModel(name, "classification", "churned", spec))
        model_id = churn_model(svc, f"honest-{name}", demo.benchmark)
        row = paid_run(svc, demo.contribution, model_id, with_manifest=demo.manifest)
        results.append((f"{name} demo-data contribution", row.status == REWARDED))
    return results


def newcomer_bar(svc: Services, cases: list[Case]) -> dict[str, str]:
    """What the attack costs honest newcomers: the shared newcomer stream's next try."""
    bars = {}
    with svc.db.session() as session:
        for case in cases:
            standing = standing_of(session, case.model_id, Supplier("next", "newbie", ()))
            level = try_level(svc.settings.reward_try_budget, standing.try_number)
            bars[case.name] = f"try {standing.try_number}, {100 * (1 - level):.4f} % confidence"
    return bars


# --- the copy rules on honest samples ----------------------------------------------------------


def fingerprinted(frame: pd.DataFrame, target: str, classification: bool, folder: Path) -> Path:
    out = folder / f"fp-{len(list(folder.iterdir()))}.bin"
    table = pa.Table.from_pandas(frame, preserve_index=False)
    fingerprint_files.build_fingerprints(
        lambda: table.to_batches(max_chunksize=1000),
        columns=fp.fingerprint_columns(list(frame.columns), target),
        target=target,
        classification=classification,
        out=out,
        tmp_root=folder,
    )
    return out


def _accepted_keys(fingerprints: Fingerprints, frame: pd.DataFrame) -> AcceptedKeys:
    keys = fp.frame_keys(fingerprints.scheme, frame, probes=False)
    tiers = [np.unique(keys.keys(t)) for t in range(len(fingerprints.scheme.tiers))]
    return AcceptedKeys(fingerprints.scheme, len(frame), tiers)


def honest_samples() -> list[tuple[str, pd.DataFrame, pd.DataFrame, pd.DataFrame, str, bool]]:
    """Disjoint honest samples: (name, benchmark, accepted, contribution, target, classified)."""
    samples = []
    spec = demo_definition().data_spec
    for name in ("customer-churn", "customer-churn-copy"):
        for seed in SEEDS:
            demo = make_demo_data(DemoModel(name, "classification", "churned", spec), seed=seed)
            other = make_demo_data(DemoModel(name, "classification", "churned", spec),
                                   seed=seed + 100)  # fmt: skip
            samples.append((f"{name}/{seed}", pd.DataFrame(demo.benchmark),
                            pd.DataFrame(other.contribution), pd.DataFrame(demo.contribution),
                            "churned", True))  # fmt: skip
    for name in ("breast_cancer", "diabetes", "wine", "digits"):
        frame = bundled_frame(name)
        third = len(frame) // 3
        for seed in SEEDS:
            shuffled = frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)
            parts = [shuffled.iloc[i * third : (i + 1) * third].reset_index(drop=True)
                     for i in range(3)]  # fmt: skip
            samples.append((f"{name}/{seed}", *parts, "target", name != "diabetes"))
    return samples


def copy_rule_false_positives(folder: Path) -> dict[str, Any]:
    leaked, known_contributions, known_rows, total_rows = [], 0, 0, 0
    samples = honest_samples()
    for name, bench, accepted, contribution, target, classification in samples:
        path = fingerprinted(bench, target, classification, folder)
        with fingerprint_files.open_fingerprints(path) as fingerprints:
            keys = fp.frame_keys(fingerprints.scheme, contribution)
            leak = count_benchmark_copies(keys, fingerprints, tolerance=0.01, version="v1")
            if leak.leaked:
                leaked.append(f"{name} ({leak.copies} > {leak.allowed:.0f} in {leak.tier})")
            mask = known_mask(keys, _accepted_keys(fingerprints, accepted), fingerprints.summary)
        known_contributions += bool(mask.any())
        known_rows += int(mask.sum())
        total_rows += len(contribution)
    return {
        "samples": len(samples),
        "leaked": leaked,
        "known_contributions": known_contributions,
        "known_rows": known_rows,
        "rows": total_rows,
    }


def _quiet() -> None:
    logging.disable(logging.WARNING)
    import warnings

    warnings.filterwarnings("ignore")
    # The label check reports "not measured" (module docstring).
    integrity.check_labels = lambda *_a, **_k: None


def run(tries: int) -> None:
    _quiet()
    with tempfile.TemporaryDirectory(prefix="lottery-") as tmp:
        folder = Path(tmp)
        svc = world(folder)
        started = time.perf_counter()
        cases = attacked_cases(svc)
        noise = play_noise(svc, cases, tries)
        print(f"information_free_tries: {tries}")
        print(f"noise_outcomes: {json.dumps(noise['outcomes'])}")
        print(f"noise_paid_tries: {noise['paid']}")
        print(f"noise_tokens_paid: {noise['tokens']:.4f}")
        print(f"noise_seconds_per_try: {noise['seconds'] / max(1, tries):.2f}")
        honest = honest_cases(svc)
        failed = [name for name, ok in honest if not ok]
        print(f"honest_contributions: {len(honest)}")
        print(f"honest_paid_share: {sum(ok for _, ok in honest) / len(honest):.3f}")
        print(f"honest_not_paid: {json.dumps(failed)}")
        print(f"newcomer_bar_after_attack: {json.dumps(newcomer_bar(svc, cases))}")
        copies_folder = folder / "fingerprints"
        copies_folder.mkdir()
        copies = copy_rule_false_positives(copies_folder)
        print(f"honest_samples: {copies['samples']}")
        print(f"leakage_false_positive_rate: {len(copies['leaked']) / copies['samples']:.3f}")
        print(f"leakage_false_positives: {json.dumps(copies['leaked'])}")
        print(
            f"known_row_false_positive_rate: "
            f"{copies['known_contributions'] / copies['samples']:.3f} of contributions, "
            f"{copies['known_rows'] / copies['rows']:.4f} of rows"
        )
        print(f"wall_seconds: {time.perf_counter() - started:.0f}")
        print(f"ratio: {noise['paid'] / tries:.4f}")
        svc.db.dispose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tries", type=int, default=200, help="information-free tries")
    args = parser.parse_args(argv)
    run(args.tries)


if __name__ == "__main__":
    main()
