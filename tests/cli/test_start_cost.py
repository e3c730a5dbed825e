"""Start cost of the `marketplace` command: importing the CLI loads no heavy library.

Every `marketplace` invocation (`--help`, `contribute`, `keys list`) imports `cli.main`; the
libraries below cost from ~0.1 s (alembic) to over a second (scikit-learn, Great Expectations)
each, and only the commands that use them import them. The API process `marketplace serve`
runs holds none of what only preparing the store needs: its memory is an upload's budget.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pipeline.core.config import Settings

HEAVY = (
    "alembic",
    "boto3",
    "dagster",
    "fastapi",
    "great_expectations",
    "numpy",
    "pandas",
    "presidio_analyzer",
    "pyarrow",
    "sklearn",
)


def _loaded_after(
    statement: str, names: tuple[str, ...] = HEAVY, env: dict[str, str] | None = None
) -> list[str]:
    code = f"import sys; {statement}; print(' '.join(m for m in {names!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return out.stdout.split()


def test_importing_the_cli_loads_no_heavy_library() -> None:
    assert _loaded_after("import cli.main") == []


def test_building_the_parser_loads_no_heavy_library() -> None:
    # `marketplace --help` builds every subcommand's parser.
    assert _loaded_after("import cli.main; cli.main.build_parser()") == []


def test_the_api_process_holds_no_migration_or_model_library(tmp_path: Path) -> None:
    # `marketplace serve` migrates and registers the demo models in a child process; the app
    # itself must not import Alembic (about 12 MB with Mako and Pygments), scikit-learn or SciPy.
    # The app is built on an empty data dir of its own: no setting comes from this environment
    # (DATABASE_URL, MARKETPLACE_DATA_DIR, a bucket, ...), so it reaches no other store.
    env = {k: v for k, v in os.environ.items() if k.lower() not in Settings.model_fields}
    statement = (
        "from pathlib import Path; from pipeline.core.config import Settings; "
        "from api.app import create_app; "
        f"create_app(Settings(marketplace_data_dir=Path({str(tmp_path)!r})))"
    )
    loaded = _loaded_after(statement, ("fastapi", "alembic", "mako", "sklearn", "scipy"), env)
    assert loaded == ["fastapi"]  # the app was built, and nothing else was imported
    assert (tmp_path / "objects").is_dir()  # on the data dir given
