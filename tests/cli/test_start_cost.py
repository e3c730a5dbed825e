"""Start cost of the `marketplace` command: importing the CLI loads no heavy library.

Every `marketplace` invocation (`--help`, `contribute`, `keys list`) imports `cli.main`; the
libraries below cost from ~0.1 s (alembic) to over a second (scikit-learn, Great Expectations)
each, and only the commands that use them import them.
"""

from __future__ import annotations

import subprocess
import sys

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


def _loaded_after(statement: str) -> list[str]:
    code = f"import sys; {statement}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_importing_the_cli_loads_no_heavy_library() -> None:
    assert _loaded_after("import cli.main") == []


def test_building_the_parser_loads_no_heavy_library() -> None:
    # `marketplace --help` builds every subcommand's parser.
    assert _loaded_after("import cli.main; cli.main.build_parser()") == []
