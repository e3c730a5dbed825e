"""A model registered from its folder (docs/sandbox.md): checked without running it, stored by
content hash, shown in the model's views; and the production settings of the sandbox."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from assets.trainers import k8s_client, owner_of, trainer_network_policy, trainer_pod_spec
from pipeline.core.config import ConfigError, Settings, load_settings
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput
from pipeline.core.tables import Model
from pipeline.evaluation.trainers import record_trainer_failure
from pipeline.models.definitions import demo_definition, load_model_folder, parse_definition
from pipeline.models.registry import register_model
from pipeline.sandbox.folders import extracted, pack_folder, trainer_key
from pipeline.store.objectstore import LocalObjectStore
from tests.support.trainers import GOOD_TRAINER, write_folder


def trainer_definition(**changes: Any) -> dict[str, Any]:
    definition = demo_definition().model_dump()
    definition.update({"name": "churn-folder", "estimator": None, "trainer": "train:fit"})
    definition.update(changes)
    return definition


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = write_folder(tmp_path / "churn", GOOD_TRAINER, trainer_definition())
    (root / "features.py").write_text("COLUMNS = ['tenure_months']\n")
    return root


def test_folder_hash_is_its_content(folder: Path, tmp_path: Path) -> None:
    archive, sha256 = pack_folder(folder)
    os.utime(folder / "train.py", (0, 0))
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"junk")
    assert pack_folder(folder) == (archive, sha256)  # times and caches change nothing
    (folder / "features.py").write_text("COLUMNS = ['support_calls']\n")
    assert pack_folder(folder)[1] != sha256
    with extracted(archive) as unpacked:
        assert sorted(p.name for p in unpacked.iterdir()) == [
            "features.py",
            "model.json",
            "train.py",
        ]
        assert (unpacked / "train.py").read_text() == (folder / "train.py").read_text()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"trainer": "train:missing"}, "train.py defines no function 'missing'"),
        ({"trainer": "other:fit"}, "other.py is not in the folder"),
        ({"trainer": "train.py"}, "must be module:function"),
        ({"estimator": "logistic_regression"}, "either an estimator or a trainer, not both"),
        ({"trainer": None}, "either an estimator or a trainer, not both"),
    ],
)
def test_bad_trainer_definition_is_refused(
    folder: Path, change: dict[str, Any], message: str
) -> None:
    (folder / "model.json").write_text(json.dumps(trainer_definition(**change)))
    with pytest.raises(InvalidInput, match=message):
        load_model_folder(folder)


def test_links_out_of_the_folder_are_refused(folder: Path) -> None:
    (folder / "passwords").symlink_to("/etc/passwd")
    with pytest.raises(InvalidInput, match="symbolic links are not allowed"):
        load_model_folder(folder)


def test_trainer_code_is_never_imported_at_registration(folder: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (folder / "train.py").write_text(
        f"open({str(marker)!r}, 'w')\n\ndef fit(train, target):\n    pass\n"
    )
    assert load_model_folder(folder).sha256
    assert not marker.exists()


def test_a_trainer_definition_without_its_folder_is_refused(db: Database) -> None:
    definition = parse_definition(trainer_definition())
    with db.session() as session, pytest.raises(InvalidInput, match="models add DIR"):
        register_model(session, definition)


def test_models_add_dir_stores_the_folder_and_views_show_it(
    cli: Any, folder: Path, settings: Settings, db: Database, client: Any
) -> None:
    status, out, _ = cli("models", "add", str(folder))
    assert status == 0, out
    model_id = int(out.strip().splitlines()[-1])
    sha256 = pack_folder(folder)[1]
    assert f"trainer train:fit from {folder}, folder sha256 {sha256}" in out
    store = LocalObjectStore(settings.objects_dir)
    with store.open(trainer_key(model_id, sha256)) as fh:
        assert fh.read() == pack_folder(folder)[0]

    [view] = [m for m in client.get("/api/models").json() if m["id"] == model_id]
    assert view["trainer"] == {"entry": "train:fit", "folder_sha256": sha256}
    assert next(m for m in client.get("/api/models").json() if m["id"] == 1)["trainer"] is None

    record_trainer_failure(
        _services(settings, db, store),
        model_id,
        "memory limit of 4096 MB exceeded (MemoryError)\nlast lines of the trainer's stderr:\n"
        "MemoryError",
    )
    status, out, _ = cli("models", "list")
    assert status == 0
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if "churn-folder" in line)
    assert f"trainer=train:fit@{sha256[:12]}" in lines[row]
    assert "trainer failed" in lines[row + 1] and "memory limit of 4096 MB" in lines[row + 1]
    assert lines[row + 3].strip() == "MemoryError"
    # The failure is the owner's: the public model view does not show it.
    assert "memory" not in json.dumps(client.get("/api/models").json())

    (folder / "train.py").write_text(GOOD_TRAINER + "\n# tuned\n")
    status, out, _ = cli("models", "add", str(folder))  # a new version of the code
    with db.session() as session:
        model = session.get(Model, model_id)
        assert model is not None and model.trainer_sha256 == pack_folder(folder)[1] != sha256
        assert model.trainer_failure is None  # the failure was the old code's


def _services(settings: Settings, db: Database, store: LocalObjectStore) -> Any:
    from pipeline.services import Services

    return Services(settings, db=db, store=store)


# --- production (Kubernetes) settings ---------------------------------------------------------


def test_k8s_client_needs_its_image_and_volume() -> None:
    with pytest.raises(ConfigError, match="TRAINER_K8S_IMAGE and TRAINER_K8S_VOLUME_CLAIM"):
        load_settings(trainer_pipes_client="k8s")


def k8s_settings() -> Settings:
    return load_settings(
        trainer_pipes_client="k8s",
        trainer_k8s_image="registry.example/marketplace:1.0",
        trainer_k8s_volume_claim="trainer-runs",
        trainer_memory_mb=2048,
        trainer_wall_seconds=600,
    )


def test_trainer_pod_has_limits_no_token_and_only_its_run_folder() -> None:
    settings = k8s_settings()
    run_dir = settings.trainer_k8s_volume_mount / "mk-trainer-abc"
    spec = trainer_pod_spec(settings, run_dir, (10001, 10001))
    assert spec["automountServiceAccountToken"] is False
    assert spec["activeDeadlineSeconds"] == 660
    assert spec["securityContext"]["runAsNonRoot"] is True
    [container] = spec["containers"]
    assert container["resources"]["limits"]["memory"] == "2304Mi"
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["volumeMounts"] == [
        {"name": "trainer-runs", "mountPath": str(run_dir), "subPath": "mk-trainer-abc"},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert volumes["tmp"]["emptyDir"] == {"sizeLimit": f"{settings.trainer_file_size_mb}Mi"}
    policy = trainer_network_policy(settings.trainer_k8s_namespace)
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["egress"] == [] and policy["spec"]["ingress"] == []


def test_trainer_pod_runs_as_the_run_folders_owner_and_never_as_root(tmp_path: Path) -> None:
    # The run folder is private to the run worker that made it (mode 0700): a pod of any
    # other user could neither read its inputs nor write its predictions.
    settings = k8s_settings()
    run_dir = Path(tempfile.mkdtemp(dir=tmp_path))
    assert run_dir.stat().st_mode & 0o777 == 0o700
    owner = owner_of(run_dir)
    assert owner == (os.getuid(), os.getgid())
    spec = trainer_pod_spec(settings, settings.trainer_k8s_volume_mount / "r", (1234, 99))
    assert spec["securityContext"]["runAsUser"] == 1234
    assert spec["securityContext"]["runAsGroup"] == 99
    with pytest.raises(dg.Failure, match="runs as root"):
        trainer_pod_spec(settings, settings.trainer_k8s_volume_mount / "r", (0, 0))


def test_k8s_client_without_dagster_k8s_fails_clearly() -> None:
    pytest.importorskip("dagster")
    try:
        import dagster_k8s  # noqa: F401
    except ImportError:
        with pytest.raises(dg.Failure, match="needs the dagster-k8s package"):
            k8s_client(k8s_settings())
    else:
        assert k8s_client(k8s_settings()) is not None
