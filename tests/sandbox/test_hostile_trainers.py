"""The sandbox against hostile training code (docs/sandbox.md): each test is a tiny train.py.

What the code cannot do is shown from inside (it reports what it found by raising, the one
channel out besides predictions) and from outside (files it tried to write are not there).
"""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import numpy as np
import pytest

from pipeline.sandbox import runs
from pipeline.sandbox.errors import SandboxUnavailable, TrainerFailed
from pipeline.sandbox.runs import FIXED_ENV, bwrap_path
from tests.conftest import PG_HOST, PG_PORT
from tests.support.trainers import GOOD_TRAINER, LIMITS, run_trainer, write_folder

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")


def failure(folder: Path, **kwargs: object) -> TrainerFailed:
    with pytest.raises(TrainerFailed) as caught:
        run_trainer(folder, **kwargs)  # type: ignore[arg-type]
    return caught.value


def test_a_good_trainer_predicts_every_benchmark_row(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "model", GOOD_TRAINER)
    labels = run_trainer(folder)
    probabilities = run_trainer(folder, probabilities=True)
    assert labels.shape == (169,) and set(labels) <= {0, 1}
    assert probabilities.shape == (169, 2)


def test_environment_holds_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://app:hunter2@db/marketplace")
    monkeypatch.setenv("ADMIN_TOKEN", "admin-secret-token")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    folder = write_folder(
        tmp_path / "model",
        """
        import os

        def fit(train, target):
            raise RuntimeError("seen: " + repr(dict(os.environ)))
        """,
    )
    seen = failure(folder).detail
    for secret in ("hunter2", "admin-secret-token", "aws-secret", "DATABASE_URL", "ADMIN_TOKEN"):
        assert secret not in seen
    names = set(eval(seen.split("seen: ", 1)[1]))
    assert names <= {
        *FIXED_ENV,
        "HOME",
        "PWD",
        "LC_CTYPE",
        "KMP_DUPLICATE_LIB_OK",
        "KMP_INIT_AT_FORK",
    }


def test_database_port_is_unreachable(tmp_path: Path) -> None:
    with socket.create_connection((PG_HOST, PG_PORT), timeout=2):
        pass  # reachable from the service's side
    folder = write_folder(
        tmp_path / "model",
        f"""
        import socket

        def fit(train, target):
            try:
                socket.create_connection(({PG_HOST!r}, {PG_PORT}), timeout=2)
            except OSError as exc:
                raise RuntimeError(f"no connection: {{exc}}")
            raise RuntimeError("connected")
        """,
    )
    detail = failure(folder).detail
    assert "no connection" in detail and "connected" not in detail.replace("no connection", "")


def test_allocating_8_gb_fails_with_the_memory_limit(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path / "model",
        """
        def fit(train, target):
            hoard = bytearray(8 * 1024 ** 3)
            return hoard
        """,
    )
    failed = failure(folder)
    assert failed.summary == f"memory limit of {LIMITS.memory_mb} MB exceeded (MemoryError)"
    assert "MemoryError" in failed.stderr_tail


def test_sleeping_forever_is_killed_at_the_wall_limit(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path / "model",
        """
        import time

        def fit(train, target):
            time.sleep(10 ** 6)
        """,
    )
    limits = dataclasses.replace(LIMITS, wall_seconds=6)
    failed = failure(folder, limits=limits)
    assert failed.summary == "wall time limit of 6 s exceeded: the run was killed"


def test_spinning_is_stopped_at_the_cpu_limit(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path / "model",
        """
        def fit(train, target):
            while True:
                pass
        """,
    )
    limits = dataclasses.replace(LIMITS, cpu_seconds=3)
    assert failure(folder, limits=limits).summary == "CPU time limit of 3 s exceeded"


def test_benchmark_labels_and_data_folder_are_absent(tmp_path: Path) -> None:
    data = tmp_path / "data" / "objects" / "datasets" / "1" / "v1"
    data.mkdir(parents=True)
    labels = data / "benchmark.csv"
    labels.write_text("mean radius,target\n1.0,1\n")
    repo = Path(__file__).resolve().parents[2]
    folder = write_folder(
        tmp_path / "model",
        f"""
        import os
        import pandas as pd

        def fit(train, target):
            features = pd.read_parquet("features.parquet")
            found = [target in features.columns]
            found += [os.path.exists(p) for p in ({str(labels)!r}, {str(tmp_path / "data")!r})]
            found += [os.path.exists(p) for p in ({str(repo / "pipeline")!r}, "/etc/passwd")]
            for top in ("/", "/tmp"):
                for root, dirs, files in os.walk(top):
                    dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
                    found += [os.path.join(root, f) for f in files
                              if f in ("benchmark.csv", "benchmark.parquet", "marketplace.db")]
            raise RuntimeError(f"found: {{found}}")
        """,
    )
    assert failure(folder).detail.endswith("found: [False, False, False, False, False]")


def test_writing_outside_its_folder_is_denied(tmp_path: Path) -> None:
    outside = tmp_path / "written-by-trainer.txt"
    folder = write_folder(
        tmp_path / "model",
        f"""
        def fit(train, target):
            written = []
            for path in ({str(outside)!r}, "/usr/lib/owned.txt", "/root/owned.txt", "/owned.txt"):
                try:
                    with open(path, "w") as fh:
                        fh.write("owned")
                    written.append(path)
                except OSError:
                    pass
            with open("scratch.txt", "w") as fh:  # its own folder is writable
                fh.write("fine")
            raise RuntimeError(f"written: {{written}}")
        """,
    )
    detail = failure(folder).detail
    assert "written: []" in detail
    assert not outside.exists()
    assert not Path("/usr/lib/owned.txt").exists() and not Path("/owned.txt").exists()


def test_three_predictions_for_169_rows_fail_with_the_counts(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path / "model",
        """
        class Three:
            def predict(self, frame):
                return [0, 1, 0]

        def fit(train, target):
            return Three()
        """,
    )
    failed = failure(folder)
    assert failed.summary == "predictions of the wrong length"
    assert failed.detail == "the training code returned 3 predictions for 169 benchmark rows"


@pytest.mark.parametrize(
    ("predict", "summary"),
    [
        ("[float('nan')] * len(frame)", "predicted labels with NaN or infinite values"),
        ("['yes'] * len(frame)", "predictions of the wrong type"),
        ("[{'a': 1}] * len(frame)", "predictions of the wrong type: not numbers or text"),
    ],
    ids=["nan", "text-for-numbers", "objects"],
)
def test_predictions_of_the_wrong_type_or_nan_fail(
    tmp_path: Path, predict: str, summary: str
) -> None:
    folder = write_folder(
        tmp_path / "model",
        f"""
        class Odd:
            def predict(self, frame):
                return {predict}

        def fit(train, target):
            return Odd()
        """,
    )
    assert failure(folder).summary == summary


def test_hand_written_object_array_is_refused_without_unpickling(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path / "model",
        """
        import numpy as np

        class Sneaky:
            def predict(self, frame):
                # Bypass the harness: write a pickled object array as the predictions file.
                np.save("predictions.npy", np.array([object()] * len(frame)), allow_pickle=True)
                raise SystemExit(0)

        def fit(train, target):
            return Sneaky()
        """,
    )
    failed = failure(folder)
    assert failed.summary in {
        "predictions of the wrong type: not numbers or text",
        "the training code raised SystemExit",
    }


def test_an_exception_fails_with_its_type_message_and_stderr(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path / "model",
        """
        def fit(train, target):
            print("loading my features", flush=True)
            raise ValueError("column 'tenure' is missing")
        """,
    )
    failed = failure(folder)
    assert failed.summary == "the training code raised ValueError"
    assert failed.detail == "the training code raised ValueError: column 'tenure' is missing"
    assert "Traceback" in failed.stderr_tail and "ValueError" in failed.stderr_tail
    assert "last lines of the trainer's stderr" in failed.describe()


def test_a_file_past_the_size_limit_fails_with_the_limit(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path / "model",
        """
        def fit(train, target):
            with open("big.bin", "wb") as fh:
                fh.write(b"x" * (80 * 1024 * 1024))
        """,
    )
    assert failure(folder).summary == f"file size limit of {LIMITS.file_size_mb} MB exceeded"


def test_packages_installed_under_tmp_are_importable_inside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A virtualenv under /tmp (a CI's, the quick-start test's linked `.venv`) is bound over
    the sandbox's own empty /tmp, not hidden by it."""
    site_dir = tmp_path / "venv-site-packages"
    site_dir.mkdir()
    (site_dir / "owner_helpers.py").write_text("ANSWER = 'from a site folder under /tmp'\n")
    executable, site_dirs = runs.python_paths()
    monkeypatch.setattr(runs, "python_paths", lambda: (executable, [*site_dirs, str(site_dir)]))
    folder = write_folder(
        tmp_path / "model",
        """
        import owner_helpers

        def fit(train, target):
            raise RuntimeError(owner_helpers.ANSWER)
        """,
    )
    assert failure(folder).detail.endswith("RuntimeError: from a site folder under /tmp")


def test_without_bubblewrap_owner_code_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_folder(tmp_path / "model", GOOD_TRAINER)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        run_trainer(folder)


def test_the_weaker_fallback_still_clears_the_environment_and_limits_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://app:hunter2@db/marketplace")
    folder = write_folder(
        tmp_path / "model",
        """
        import os

        def fit(train, target):
            assert "DATABASE_URL" not in os.environ, "leaked"
            return bytearray(8 * 1024 ** 3)
        """,
    )
    failed = failure(folder, isolation="none")
    assert failed.summary == f"memory limit of {LIMITS.memory_mb} MB exceeded (MemoryError)"


def test_links_planted_in_the_box_are_not_followed(tmp_path: Path) -> None:
    # A result and predictions only the service can read, outside the sandbox: linked to from
    # the box, they would be read by the service as the trainer's own.
    outside = tmp_path / "outside"
    outside.mkdir()
    np.save(outside / "predictions.npy", np.zeros(169, dtype=np.int64))
    (outside / "result.json").write_text('{"ok": true}')
    folder = write_folder(
        tmp_path / "model",
        f"""
        import os

        def fit(train, target):
            box = os.environ["HOME"]
            os.symlink({str(outside / "result.json")!r}, os.path.join(box, "result.json"))
            os.symlink({str(outside / "predictions.npy")!r}, os.path.join(box, "predictions.npy"))
            os._exit(0)
        """,
    )
    assert failure(folder).summary == "the training code wrote no result"
