"""README's configuration table and the settings object name the same variables."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.core.config import Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def configuration_table_variables(text: str) -> list[str]:
    """The first-column names of the table under README's `## Configuration` heading."""
    match = re.search(r"^## Configuration\s*$(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, "README has no '## Configuration' section"
    names = []
    for line in match.group(1).splitlines():
        cell = re.match(r"^\|\s*`([A-Z][A-Z0-9_]*)`\s*\|", line)
        if cell:
            names.append(cell.group(1))
    return names


def test_readme_configuration_table_matches_settings_fields() -> None:
    documented = configuration_table_variables(README.read_text(encoding="utf-8"))
    assert documented, "README's configuration table lists no variables"
    assert len(documented) == len(set(documented)), "a variable is documented twice"
    fields = {name.upper() for name in Settings.model_fields}
    assert sorted(set(documented) - fields) == [], "documented but not a Settings field"
    assert sorted(fields - set(documented)) == [], "a Settings field missing from README's table"


def test_table_parser_reads_only_the_configuration_section() -> None:
    text = (
        "## Configuration\n\n| variable | default |\n|---|---|\n| `A_B` | 1 |\n| `C` | 2 |\n\n"
        "## Other\n\n| `D` | 3 |\n"
    )
    assert configuration_table_variables(text) == ["A_B", "C"]
