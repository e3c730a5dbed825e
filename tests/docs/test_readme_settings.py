"""docs/configuration.md's settings table and the settings object name the same variables."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.core.config import Settings

CONFIGURATION = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def settings_table_variables(text: str) -> list[str]:
    """The first-column names of the table under the `## Settings` heading."""
    match = re.search(r"^## Settings\s*$(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, "docs/configuration.md has no '## Settings' section"
    names = []
    for line in match.group(1).splitlines():
        cell = re.match(r"^\|\s*`([A-Z][A-Z0-9_]*)`\s*\|", line)
        if cell:
            names.append(cell.group(1))
    return names


def test_configuration_settings_table_matches_settings_fields() -> None:
    documented = settings_table_variables(CONFIGURATION.read_text(encoding="utf-8"))
    assert documented, "the settings table lists no variables"
    assert len(documented) == len(set(documented)), "a variable is documented twice"
    fields = {name.upper() for name in Settings.model_fields}
    assert sorted(set(documented) - fields) == [], "documented but not a Settings field"
    assert sorted(fields - set(documented)) == [], "a Settings field missing from the table"


def test_table_parser_reads_only_the_settings_section() -> None:
    text = (
        "# Configuration\n\n## Settings\n\n| variable | default |\n|---|---|\n| `A_B` | 1 |\n"
        "| `C` | 2 |\n\n## Notes\n\n| `D` | 3 |\n"
    )
    assert settings_table_variables(text) == ["A_B", "C"]
