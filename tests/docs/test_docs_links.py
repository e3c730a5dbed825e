"""Every relative link in README.md and docs/*.md names an existing file (and heading)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`+[^`\n]*`+")
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def prose(text: str) -> str:
    """The text without fenced blocks and inline code, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    kept = "".join(
        ch for ch in text if ch in " -" or unicodedata.category(ch)[0] in "LMN" or ch == "_"
    )
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file (repeats get -1, -2, …)."""
    seen: dict[str, int] = {}
    result = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(document: Path) -> list[str]:
    problems = []
    for target in LINK.findall(prose(document.read_text(encoding="utf-8"))):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (document.parent / file_part).resolve() if file_part else document
        if not linked.exists():
            problems.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{target}: no heading with that anchor in {linked.name}")
    return problems


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(document: Path) -> None:
    assert broken_links(document) == []


def test_every_doc_is_in_the_index() -> None:
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    listed = {target for target in LINK.findall(index) if not EXTERNAL.match(target)}
    pages = {p.name for p in DOCUMENTS if p.parent.name == "docs" and p.name != "README.md"}
    assert sorted(pages - listed) == []


def test_slugs_follow_github() -> None:
    assert slug("S3 bucket notification → SQS") == "s3-bucket-notification--sqs"
    assert slug("Dagster instance, concurrency and `DAGSTER_PG_URL`") == (
        "dagster-instance-concurrency-and-dagster_pg_url"
    )
    assert slug("1. A run's contributions are valued together") == (
        "1-a-runs-contributions-are-valued-together"
    )
    assert slug("Contract and contributions (spec §4.1, §4.2)") == (
        "contract-and-contributions-spec-41-42"
    )


def test_a_missing_file_or_heading_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Title\n\n## A part\n", encoding="utf-8")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](other.md#a-part) [ok](#here) [gone](nowhere.md) [bad](other.md#nope)\n"
        "`[code](nowhere.md)` [web](https://example.org/x)\n\n## Here\n",
        encoding="utf-8",
    )
    assert broken_links(doc) == [
        "nowhere.md: no such file",
        "other.md#nope: no heading with that anchor in other.md",
    ]
