"""A model's paired fits (issue 35): the definition's `paired_fits`, its column and migration,
the valuation's scorer given it, and the pool's band kept and shown (job view, ledger, Dagster,
`models list`, `GET /api/models`).

The engine that fits K subsamples and measures the band is built apart; here a valuation's
band is set on `BatchValuation.stability` directly and followed through the records writer."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from sqlalchemy import create_engine, inspect, select, text

from assets.evaluation_figures import evaluation_metadata, shares_by
from cli.main import main
from pipeline.core.config import Settings, get_settings
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput
from pipeline.core.migrate import downgrade, upgrade
from pipeline.core.tables import Model
from pipeline.demo.churn_data import churn_benchmark_rows, churn_rows
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.definitions import demo_definition, parse_definition
from pipeline.models.paired_fits import MAX_PAIRED_FITS
from pipeline.models.registry import register_model
from pipeline.rewards import batch_valuation, reference_check
from pipeline.rewards import valuation as valuation_module
from pipeline.rewards.players import Player
from pipeline.rewards.stability import Stability
from pipeline.rewards.valuation import BatchValuation, ValuationSettings
from pipeline.rewards.valuation_records import band_text
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

BAND = Stability(low=1.25, high=3.75, fits=4)


def _definition(**fields: Any) -> dict[str, Any]:
    return {**demo_definition().model_dump(exclude={"paired_fits"}), **fields}


# --- the definition ----------------------------------------------------------------------------


def test_a_definition_without_paired_fits_has_one() -> None:
    assert parse_definition(_definition()).paired_fits == 1
    assert parse_definition(_definition()).table_columns()["paired_fits"] == 1


@pytest.mark.parametrize("fits", [1, 2, 4, MAX_PAIRED_FITS])
def test_paired_fits_from_1_to_the_maximum_are_accepted(fits: int) -> None:
    definition = parse_definition(_definition(paired_fits=fits))
    assert definition.paired_fits == fits
    assert definition.table_columns()["paired_fits"] == fits


@pytest.mark.parametrize(
    ("fits", "why"),
    [
        (0, "greater than or equal to 1"),
        (MAX_PAIRED_FITS + 1, f"less than or equal to {MAX_PAIRED_FITS}"),
        (-3, "greater than or equal to 1"),
        (True, "valid integer"),
        (2.5, "valid integer"),
        (4.0, "valid integer"),
        ("4", "valid integer"),
        (None, "valid integer"),
    ],
)
def test_paired_fits_that_are_no_count_of_fits_are_refused_naming_the_field(
    fits: object, why: str
) -> None:
    with pytest.raises(InvalidInput, match=f"model definition: paired_fits: .*{why}"):
        parse_definition(_definition(paired_fits=fits))


def test_a_trainer_model_takes_paired_fits_too() -> None:
    data = _definition(paired_fits=3, trainer="train:fit")
    data.pop("estimator")
    definition = parse_definition(data)
    assert definition.paired_fits == 3
    assert definition.table_columns()["paired_fits"] == 3


# --- the CLI and the API -----------------------------------------------------------------------


@pytest.fixture
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("MARKETPLACE_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("DATABASE_URL", settings.resolved_database_url)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_models_add_stores_paired_fits_and_models_list_shows_it(
    cli_env: None, tmp_path: Path, db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(_definition(name="churn-steady", paired_fits=4)))

    assert main(["models", "add", str(path)]) == 0
    assert main(["models", "list"]) == 0

    lines = capsys.readouterr().out.splitlines()
    listed = [line for line in lines if "\ttarget=" in line]
    [steady] = [line for line in listed if "\tchurn-steady\t" in line]
    [demo] = [line for line in listed if "\tcustomer-churn\t" in line]
    assert steady.endswith("\tpaired_fits=4")
    assert "recipe=" in steady
    assert "paired_fits" not in demo  # one fit, the default, is not shown
    with db.session() as session:
        stored = session.scalar(select(Model.paired_fits).where(Model.name == "churn-steady"))
    assert stored == 4


@pytest.mark.parametrize("fits", [0, MAX_PAIRED_FITS + 1, True, 2.5, "4"])
def test_models_add_refuses_paired_fits_with_a_message_naming_the_field(
    cli_env: None, tmp_path: Path, db: Database, capsys: pytest.CaptureFixture[str], fits: object
) -> None:
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(_definition(name="churn-wobbly", paired_fits=fits)))

    assert main(["models", "add", str(path)]) != 0

    assert "model definition: paired_fits:" in capsys.readouterr().err
    with db.session() as session:
        assert session.scalar(select(Model).where(Model.name == "churn-wobbly")) is None


def test_the_api_s_model_list_shows_paired_fits(client: Any, db: Database) -> None:
    with db.session() as session:
        model_id = register_model(
            session, parse_definition(_definition(name="churn-steady", paired_fits=8))
        ).id

    models = {m["id"]: m for m in client.get("/api/models").json()}

    assert models[1]["paired_fits"] == 1
    assert models[model_id]["paired_fits"] == 8


# --- the migration -----------------------------------------------------------------------------


def test_the_migration_gives_existing_models_one_paired_fit(
    database_url: str, db: Database
) -> None:
    db.dispose()
    downgrade(database_url, "0013")
    engine = create_engine(database_url)
    try:
        columns = {c["name"] for c in inspect(engine).get_columns("models")}
        assert "paired_fits" not in columns
        engine.dispose()

        upgrade(database_url)

        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM models")).scalar_one() >= 1
            fits = conn.execute(text("SELECT DISTINCT paired_fits FROM models")).scalars().all()
        assert fits == [1]
    finally:
        engine.dispose()
        upgrade(database_url)  # at head for the tests after, whatever happened
    with db.session() as session:  # a model registered after the migration gets its own K
        model = register_model(
            session, parse_definition(_definition(name="churn-steady", paired_fits=5))
        )
        assert model.paired_fits == 5


# --- the valuation: the scorer's K and the band kept and shown ---------------------------------


def _set_paired_fits(db: Database, fits: int, model_id: int = 1) -> None:
    with db.session() as session:
        model = session.get(Model, model_id)
        assert model is not None
        model.paired_fits = fits


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The valuation's `value_batch`, its result given `BAND` when the scorer fits more than
    once (as the engine will); returns the paired fits each scorer was built with."""
    seen: list[int] = []

    def value_batch(scorer: BenchmarkScorer, *args: Any, **kwargs: Any) -> BatchValuation:
        seen.append(scorer.paired_fits)
        valuation = valuation_module.value_batch(scorer, *args, **kwargs)
        band = BAND if scorer.paired_fits > 1 else None
        return dataclasses.replace(valuation, stability=band)

    monkeypatch.setattr(batch_valuation, "value_batch", value_batch)
    return seen


def test_a_band_measured_over_paired_fits_is_kept_and_shown(
    client: Any,
    settings: Settings,
    db: Database,
    store: LocalObjectStore,
    measured: list[int],
) -> None:
    _set_paired_fits(db, 4)
    add_benchmark(db, store)
    job_id, version = contribute(db, store, churn_rows(200, seed=2), with_manifest=manifest())

    run = run_pipeline(Services(settings, db=db, store=store), version)

    assert measured == [4]  # the scorer was built with the model's K
    quality = job(db, job_id).quality or {}
    assert quality["valuation"]["stability"] == {"low": 1.25, "high": 3.75, "fits": 4}
    assert quality["valuation"]["paired_fits"] == 4
    # The job view.
    view = valuation_view(quality)
    assert view is not None
    assert view["stabilityBand"] == {"low": 1.25, "high": 3.75, "fits": 4}
    assert view["pairedFits"] == 4
    assert view["method"] == "exact"
    # The ledger: the method and the band beside the exact amount.
    [entry] = client.get("/api/rewards", params={"wallet": WALLET_A}).json()["entries"]
    assert entry["valuationMethod"] == "exact"
    assert entry["stabilityBand"] == {"low": 1.25, "high": 3.75, "fits": 4}
    assert entry["pairedFits"] == 4
    assert entry["amount"].isdigit()
    # Dagster's metadata of the evaluation.
    [outcome] = [o for o in run.evaluations if o.kind == "contribution"]
    metadata = evaluation_metadata(outcome)
    assert metadata["valuation_method"] == "exact"
    assert metadata["stability"] == "band [+1.25, +3.75] % over 4 paired fits"
    assert metadata["paired_fits"] == 4
    assert shares_by(outcome).endswith("pool band [+1.25, +3.75] % over 4 paired fits")


def test_one_fit_measures_no_band_and_says_so(
    client: Any,
    settings: Settings,
    db: Database,
    store: LocalObjectStore,
    measured: list[int],
) -> None:
    add_benchmark(db, store)
    job_id, version = contribute(db, store, churn_rows(200, seed=2), with_manifest=manifest())

    run = run_pipeline(Services(settings, db=db, store=store), version)

    assert measured == [1]
    view = valuation_view(job(db, job_id).quality)
    assert view is not None
    assert view["stabilityBand"] is None
    assert view["pairedFits"] == 1
    [entry] = client.get("/api/rewards", params={"wallet": WALLET_A}).json()["entries"]
    assert entry["stabilityBand"] is None
    assert entry["valuationMethod"] == "exact"
    [outcome] = [o for o in run.evaluations if o.kind == "contribution"]
    assert evaluation_metadata(outcome)["stability"] == "not measured (one fit)"


def test_a_job_valued_before_bands_has_null_band_fields() -> None:
    view = valuation_view({"valuation": {"pool_pct": 2.0, "method": "exact"}})
    assert view is not None
    assert view["stabilityBand"] is None
    assert view["pairedFits"] is None


def test_band_text() -> None:
    assert band_text(BAND, 4) == "band [+1.25, +3.75] % over 4 paired fits"
    assert band_text(None, 1) == "not measured (one fit)"
    assert band_text(None, 4) == "not measured"


def test_the_reference_check_measures_with_the_owner_s_paired_fits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reference pool is compared with the owner's mean of K fits: it is fit K times too."""
    built: list[int] = []

    class Recording(BenchmarkScorer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            built.append(self.paired_fits)

    monkeypatch.setattr(reference_check, "BenchmarkScorer", Recording)
    bench = pd.DataFrame(churn_benchmark_rows(200))
    scorer = BenchmarkScorer(
        bench,
        task_type="classification",
        estimator="logistic_regression",
        target_column="churned",
        metric_name="accuracy",
        paired_fits=3,
    )
    base = pd.DataFrame(churn_rows(150, seed=1))
    players = [Player("a", pd.DataFrame(churn_rows(120, seed=3)))]
    settings = ValuationSettings(resamples=50)
    valuation = valuation_module.value_batch(
        scorer, base, players, higher_is_better=True, settings=settings
    )

    reference_check.check_valuation(scorer, base, players, valuation, settings=settings)

    assert built == [3]
