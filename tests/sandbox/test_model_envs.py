"""A model folder's requirements.txt, installed once with uv from a local wheel folder (no index:
an air-gapped host), run in the box, shared, refused when it cannot be, and pruned when unused
(docs/sandbox.md, "Requirements: the owner's own packages")."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assets.trainers import trainer_pod_spec
from cli.model_folders import prune_at_start
from pipeline.core.config import Settings, load_settings
from pipeline.core.db import Database
from pipeline.core.tables import Model
from pipeline.evaluation.trainers import StepTrainers
from pipeline.models.environments import prune_environments
from pipeline.sandbox.env_archives import archive_key, ensure_environment, keep_archive
from pipeline.sandbox.envs import ENV_INFO, Environment, EnvLimits, install_environment, interpreter
from pipeline.sandbox.errors import TrainerFailed
from pipeline.sandbox.requirements import harness_pins, parse_requirements
from pipeline.store.objectstore import LocalObjectStore
from tests.support.model_envs import envs, model_folder, predict
from tests.support.wheels import repack_installed, write_sdist, write_wheel

pytestmark = pytest.mark.slow

GREETING = {"mk_greeting.py": "def column(name):\n    return name\n"}


@pytest.fixture
def backend() -> str:
    """SQLite only: each test installs an environment, seconds of uv and bytecode compiling,
    and the store's part is the same on both databases (the model's columns: the migration
    test, and tests/sandbox/test_model_env_index.py runs on both)."""
    return "sqlite"


@pytest.fixture(scope="module")
def wheel_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An operator's local wheel folder, and uv told to use it and nothing else
    (UV_NO_INDEX, UV_FIND_LINKS: uv's own settings); one uv cache for the module."""
    folder = tmp_path_factory.mktemp("wheels")
    for name in harness_pins():
        repack_installed(folder, name)
    write_wheel(folder, "mk-greeting", "1.0.0", GREETING)
    write_wheel(folder, "mk-old-numpy", "1.0.0", {"mk_old_numpy.py": ""}, ["numpy<2"])
    # A package whose .pth file runs code in every interpreter that starts with it: never on
    # the service's host, only in the box (where this path does not exist).
    PTH_MARKER.append(tmp_path_factory.mktemp("pth") / "ran")
    write_wheel(
        folder, "mk-pth", "1.0.0", {"mk_pth.pth": f"import os; open({str(PTH_MARKER[0])!r}, 'w')\n"}
    )
    built = tmp_path_factory.mktemp("built") / "ran"
    setup_py = f"open({str(built)!r}, 'w').write('ran')\nfrom setuptools import setup\nsetup()\n"
    write_sdist(folder, "mk-built", "0.1", setup_py)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("UV_NO_INDEX", "1")
        patch.setenv("UV_FIND_LINKS", str(folder))
        patch.setenv("UV_CACHE_DIR", str(tmp_path_factory.mktemp("uv-cache")))
        yield folder
    assert not built.exists(), "a build script of an sdist ran"


PTH_MARKER: list[Path] = []
WITH_PTH = "mk-greeting==1.0.0\nmk-pth==1.0.0\n"


def test_requirements_install_from_a_local_wheel_folder_and_the_box_runs_them(
    wheel_folder: Path, cli: Any, settings: Settings, db: Database, client: Any, tmp_path: Path
) -> None:
    folder = model_folder(tmp_path / "greeting", "churn-greeting", WITH_PTH)
    status, out, err = cli("models", "add", str(folder))
    assert status == 0, err
    model_id = int(out.strip().splitlines()[-1])
    with db.session() as session:
        model = session.get(Model, model_id)
        assert model is not None and model.trainer_env is not None
        key, size, packages = model.trainer_env, model.trainer_env_bytes, model.trainer_env_packages
    assert envs(settings) == [key]
    assert "mk-greeting==1.0.0" in (packages or [])
    assert f"pandas=={harness_pins()['pandas']}" in (packages or [])
    assert "scikit-learn" not in " ".join(packages or [])
    assert size is not None and size > 10 * 1024 * 1024
    assert not PTH_MARKER[0].exists(), "code of an installed package ran on the service's host"

    # Evaluated in the box with the environment's interpreter: the trainer imports its package
    # and does not see the service's.
    predictions = predict(settings, db, model_id)
    assert len(predictions) == 50 and len(set(predictions.tolist())) == 1
    assert not PTH_MARKER[0].exists()

    [view] = [m for m in client.get("/api/models").json() if m["id"] == model_id]
    assert view["environment"] == {"sha256": key, "size_bytes": size, "packages": packages}
    status, out, _ = cli("models", "list")
    assert f"environment {key}" in out and "mk-greeting==1.0.0" in out

    # The same requirements for another model: the environment is shared, nothing installed.
    other = model_folder(tmp_path / "other", "churn-greeting-2", "# same\n" + WITH_PTH)
    python = interpreter(settings.envs_dir / key)
    before = os.lstat(python).st_ino
    started = time.monotonic()
    status, out, err = cli("models", "add", str(other))
    assert status == 0, err
    assert time.monotonic() - started < 5  # the install itself is found in milliseconds
    assert envs(settings) == [key] and os.lstat(python).st_ino == before
    with db.session() as session:
        assert session.get(Model, int(out.strip().splitlines()[-1])).trainer_env == key  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def prebuilt(wheel_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Environment:
    """One environment of `GREETING_REQUIREMENTS`, installed once for the module's tests that
    need one already there (`seed`)."""
    root = tmp_path_factory.mktemp("prebuilt")
    limits = EnvLimits.from_settings(load_settings())
    environment = install_environment(parse_requirements(GREETING_REQUIREMENTS), root, limits)
    PREBUILT_ROOTS[environment.sha256] = root
    return environment


PREBUILT_ROOTS: dict[str, Path] = {}
GREETING_REQUIREMENTS = b"mk-greeting==1.0.0\n"


def seed(environment: Environment, root: Path) -> Path:
    """The prebuilt environment in `root`, as hard links (an install's cost saved)."""

    def link(source: str, target: str) -> None:
        if Path(source).name == ENV_INFO:
            shutil.copy2(source, target)  # its time marks use; never shared
        else:
            os.link(source, target)

    target = root / environment.sha256
    shutil.copytree(
        PREBUILT_ROOTS[environment.sha256] / environment.sha256,
        target,
        symlinks=True,
        copy_function=link,
    )
    return target


def _refused(cli: Any, settings: Settings, db: Database, folder: Path) -> str:
    status, out, err = cli("models", "add", str(folder))
    assert status == 1, out
    with db.session() as session:
        assert session.query(Model).filter(Model.name.like("churn-refused%")).count() == 0
    assert [name for name in envs(settings) if not name.startswith(".")] == []
    assert not (settings.objects_dir / "trainers").exists()
    return str(err)


@pytest.mark.parametrize(
    ("requirements", "said"),
    [
        # The resolver's own message.
        ("mk-greeting==9.9.9\n", "there is no version of mk-greeting==9.9.9"),
        # An sdist only: its build script would run; wheels only.
        ("mk-built==0.1\n", "mk-built"),
    ],
)
def test_requirements_that_cannot_be_installed_are_refused_and_nothing_is_stored(
    wheel_folder: Path,
    cli: Any,
    settings: Settings,
    db: Database,
    tmp_path: Path,
    requirements: str,
    said: str,
) -> None:
    err = _refused(cli, settings, db, model_folder(tmp_path / "m", "churn-refused", requirements))
    assert "requirements.txt cannot be installed; uv says:" in err
    assert said in err
    if "mk-built" in requirements:
        assert "has no usable wheels" in err


def test_the_harness_conflict_found_by_the_resolver_names_both(
    wheel_folder: Path, cli: Any, settings: Settings, db: Database, tmp_path: Path
) -> None:
    err = _refused(
        cli, settings, db, model_folder(tmp_path / "m", "churn-refused", "mk-old-numpy==1.0.0\n")
    )
    assert "mk-old-numpy" in err and f"numpy=={harness_pins()['numpy']}" in err


@pytest.mark.parametrize(
    ("variable", "said"),
    [
        ("TRAINER_ENV_MAX_MB", "the environment is"),
        ("TRAINER_ENVS_MAX_TOTAL_MB", "all environments would use"),
    ],
)
def test_an_environment_over_a_size_limit_is_refused(
    wheel_folder: Path,
    cli: Any,
    settings: Settings,
    db: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    said: str,
) -> None:
    monkeypatch.setenv(variable, "5")
    folder = model_folder(tmp_path / "m", "churn-refused", "mk-greeting==1.0.0\n")
    err = _refused(cli, settings, db, folder)
    assert said in err and f"over the limit of 5 MB ({variable})" in err


def test_an_install_over_its_time_limit_is_stopped_and_refused(
    wheel_folder: Path,
    cli: Any,
    settings: Settings,
    db: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An index that accepts connections and never answers: uv waits, the limit stops it.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        monkeypatch.delenv("UV_NO_INDEX")
        monkeypatch.delenv("UV_FIND_LINKS")
        monkeypatch.setenv("UV_INDEX_URL", f"http://127.0.0.1:{silent.getsockname()[1]}/simple")
        monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "empty-cache"))
        monkeypatch.setenv("TRAINER_ENV_INSTALL_SECONDS", "2")
        folder = model_folder(tmp_path / "m", "churn-refused", "mk-greeting==1.0.0\n")
        started = time.monotonic()
        err = _refused(cli, settings, db, folder)
    assert "installing took longer than 2 s (TRAINER_ENV_INSTALL_SECONDS)" in err
    assert time.monotonic() - started < 20


def test_reregistering_without_requirements_removes_the_unused_environment(
    prebuilt: Environment, cli: Any, settings: Settings, db: Database, tmp_path: Path
) -> None:
    seed(prebuilt, settings.envs_dir)
    folder = model_folder(tmp_path / "m", "churn-greeting", "mk-greeting==1.0.0\n")
    assert cli("models", "add", str(folder))[0] == 0
    assert len(envs(settings)) == 1
    (folder / "requirements.txt").unlink()
    (folder / "train.py").write_text("def fit(train, target):\n    return None\n")
    assert cli("models", "add", str(folder))[0] == 0
    assert envs(settings) == []
    with db.session() as session:
        model = session.query(Model).filter_by(name="churn-greeting").one()
        assert model.trainer_env is None and model.trainer_env_packages is None


def test_prune_removes_environments_no_model_uses_once_untouched(
    prebuilt: Environment, cli: Any, settings: Settings, db: Database
) -> None:
    orphan = prebuilt
    seed(orphan, settings.envs_dir)
    store = LocalObjectStore(settings.objects_dir)
    # Just installed: a registration may be about to use it.
    assert prune_environments(db, store, settings).removed == []
    old = time.time() - 3600
    os.utime(settings.envs_dir / orphan.sha256 / ".marketplace-env.json", (old, old))
    os.utime(settings.envs_dir / orphan.sha256, (old, old))
    status, out, _ = cli("models", "prune-envs")
    assert status == 0 and f"removed {orphan.sha256}" in out
    assert envs(settings) == []


def test_a_server_start_prunes_unused_environments(
    prebuilt: Environment, settings: Settings, db: Database, capsys: Any
) -> None:
    orphan = prebuilt
    seed(orphan, settings.envs_dir)
    old = time.time() - 3600
    for path in (
        settings.envs_dir / orphan.sha256 / ".marketplace-env.json",
        settings.envs_dir / orphan.sha256,
    ):
        os.utime(path, (old, old))
    prune_at_start(settings, "serve")
    assert envs(settings) == []
    assert "marketplace serve: removed 1 environments no model uses" in capsys.readouterr().out


def test_an_environment_travels_as_an_archive_and_is_unpacked_not_installed(
    prebuilt: Environment, tmp_path: Path
) -> None:
    built = prebuilt
    registering_host = PREBUILT_ROOTS[built.sha256]
    store = LocalObjectStore(tmp_path / "objects")
    keep_archive(store, registering_host / built.sha256, built.sha256)
    assert store.exists(archive_key(built.sha256))

    other_host = tmp_path / "worker-envs"
    env = ensure_environment(store, other_host, built.sha256)
    assert env == other_host / built.sha256
    done = subprocess.run(
        [
            str(interpreter(env)),
            "-I",
            "-c",
            "import mk_greeting, pandas; print(pandas.__version__)",
        ],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == harness_pins()["pandas"]
    assert ensure_environment(store, other_host, built.sha256) == env  # found, not unpacked again

    with pytest.raises(TrainerFailed, match="neither on this host"):
        ensure_environment(store, tmp_path / "third-host", "0" * 64)


def test_the_trainer_pod_mounts_the_environment_read_only() -> None:
    settings = load_settings(
        trainer_pipes_client="k8s",
        trainer_k8s_image="registry.example/marketplace:1.0",
        trainer_k8s_volume_claim="trainer-runs",
    )
    mount = settings.trainer_k8s_volume_mount
    env = mount / "envs" / ("a" * 64)
    spec = trainer_pod_spec(settings, mount / "mk-trainer-abc", (10001, 10001), env=env)
    [container] = spec["containers"]
    assert container["volumeMounts"][-1] == {
        "name": "trainer-runs",
        "mountPath": str(env),
        "subPath": f"envs/{'a' * 64}",
        "readOnly": True,
    }
    plain = trainer_pod_spec(settings, mount / "mk-trainer-abc", (10001, 10001))
    assert len(plain["containers"][0]["volumeMounts"]) == 2


def test_with_trainer_pods_the_archive_is_stored_and_unpacked_on_the_shared_volume(
    prebuilt: Environment,
    cli: Any,
    settings: Settings,
    db: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pipeline.sandbox.runner import SubprocessRunner
    from pipeline.services import Services

    volume = tmp_path / "trainer-runs"
    for name, value in {
        "TRAINER_PIPES_CLIENT": "k8s",
        "TRAINER_K8S_IMAGE": "registry.example/marketplace:1.0",
        "TRAINER_K8S_VOLUME_CLAIM": "trainer-runs",
        "TRAINER_K8S_VOLUME_MOUNT": str(volume),
    }.items():
        monkeypatch.setenv(name, value)
    seed(prebuilt, settings.envs_dir)
    folder = model_folder(tmp_path / "m", "churn-greeting", GREETING_REQUIREMENTS.decode())
    status, out, err = cli("models", "add", str(folder))
    assert status == 0, err
    store = LocalObjectStore(settings.objects_dir)
    assert store.exists(archive_key(prebuilt.sha256))  # registration stored it

    # The run worker: its runner makes run folders on the shared volume, and the model's
    # environment is unpacked there from the archive (this host's data folder is not used).
    k8s = load_settings(
        marketplace_data_dir=tmp_path / "worker-data",
        database_url=settings.resolved_database_url,
    )
    runner = SubprocessRunner()
    runner.run_root = volume
    trainers = StepTrainers(Services(k8s, db=db, store=store), runner)
    try:
        trainer = trainers.for_model(int(out.strip().splitlines()[-1]))
        assert trainer is not None and trainer.env == volume / "envs" / prebuilt.sha256
        assert interpreter(trainer.env).is_symlink()
    finally:
        trainers.close()
    assert not (tmp_path / "worker-data" / "envs").exists()
