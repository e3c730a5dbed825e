"""The two test model folders of tests/sandbox/model_folders against the real package index
(CI reaches PyPI): one needs `inflection`, which the service does not install, and is registered
and evaluated in the box; the other names a version that does not exist and is refused."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import Model
from tests.support.model_envs import envs, predict

pytestmark = pytest.mark.slow

FOLDERS = Path(__file__).parent / "model_folders"


def test_a_model_needing_a_package_the_service_lacks_is_registered_and_evaluated(
    cli: Any, settings: Settings, db: Database
) -> None:
    assert importlib.util.find_spec("inflection") is None  # not one of the service's packages
    status, out, err = cli("models", "add", str(FOLDERS / "inflection"))
    assert status == 0, err
    assert "installing requirements.txt with uv (1 requirement)" in out
    model_id = int(out.strip().splitlines()[-1])
    with db.session() as session:
        model = session.get(Model, model_id)
        assert model is not None
        assert "inflection==0.5.1" in (model.trainer_env_packages or [])
    predictions = predict(settings, db, model_id)
    assert len(predictions) == 50


def test_a_model_whose_requirements_cannot_be_resolved_is_refused(
    cli: Any, settings: Settings, db: Database
) -> None:
    status, out, err = cli("models", "add", str(FOLDERS / "unresolvable"))
    assert status == 1, out
    assert "requirements.txt cannot be installed; uv says:" in err
    assert "inflection==99.0.0" in err
    with db.session() as session:
        assert session.query(Model).filter_by(name="churn-unresolvable").count() == 0
    assert [name for name in envs(settings) if not name.startswith(".")] == []
