"""A model folder's requirements.txt is checked before anything is installed (docs/sandbox.md,
"Requirements"): exact pins only, nothing fetched from where the folder says, no clash with the
harness's own packages, at most 64 KiB; its environment's key is its content."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from pipeline.core.errors import InvalidInput
from pipeline.sandbox.requirements import (
    MAX_REQUIREMENTS_BYTES,
    folder_requirements,
    harness_pins,
    parse_requirements,
)

HASH = "sha256:" + "ab" * 32


def test_pinned_requirements_with_hashes_extras_and_markers_are_kept() -> None:
    text = (
        "# the owner's packages\n"
        "Inflection==0.5.1  # a comment\n"
        f"six==1.17.0 \\\n    --hash={HASH}\n"
        'requests[socks]==2.32.3; python_version >= "3.8"\n'
        "\n"
    )
    requirements = parse_requirements(text.encode())
    assert requirements.lines == {
        "inflection": "inflection==0.5.1",
        "six": f"six==1.17.0 --hash={HASH}",
        "requests": 'requests[socks]==2.32.3; python_version >= "3.8"',
    }
    installed = requirements.install_lines()
    assert installed[:3] == list(requirements.lines.values())
    # The harness's packages are added at the service's own versions.
    assert f"pandas=={importlib.metadata.version('pandas')}" in installed
    assert f"dagster-pipes=={importlib.metadata.version('dagster-pipes')}" in installed
    assert not any(line.startswith("six==") for line in installed[3:])  # named once


def test_harness_pins_are_the_versions_the_service_runs() -> None:
    pins = harness_pins()
    for name in ("numpy", "pandas", "pyarrow", "dagster-pipes", "python-dateutil"):
        assert pins[name] == importlib.metadata.version(name)
    assert "scikit-learn" not in pins  # the environment holds only what the harness needs


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("inflection", "is not pinned"),
        ("inflection>=0.5", "is not pinned"),
        ("inflection==0.5.*", "is not pinned"),
        ("inflection==0.5.1,!=0.5.0", "is not pinned"),
        ("inflection @ https://example.org/inflection-0.5.1.whl", "is a URL or a path"),
        ("inflection @ file:///opt/inflection", "is a URL or a path"),
        ("https://example.org/inflection-0.5.1-py2.py3-none-any.whl", "is a URL or a path"),
        ("./vendor/inflection-0.5.1-py2.py3-none-any.whl", "is a URL or a path"),
        ("/opt/wheels/inflection.tar.gz", "is a URL or a path"),
        ("-e .", "option -e is not allowed"),
        ("--index-url https://example.org/simple", "option --index-url is not allowed"),
        ("--extra-index-url=https://example.org/simple", "option --extra-index-url=https"),
        ("-r other.txt", "option -r is not allowed"),
        ("--find-links /opt/wheels", "option --find-links is not allowed"),
        ("inflection==0.5.1 --no-binary :all:", "only --hash=ALGORITHM:HEX"),
        ("inflection==0.5.1\nInflection==0.5.1", "line 2: Inflection is named twice"),
        ("not a requirement !", "not a requirement"),
    ],
)
def test_requirements_that_are_not_exact_pins_from_the_index_are_refused(
    line: str, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_requirements(f"{line}\n".encode())


def test_a_pin_that_conflicts_with_the_harness_is_refused_naming_both() -> None:
    pandas = importlib.metadata.version("pandas")
    with pytest.raises(InvalidInput) as caught:
        parse_requirements(b"inflection==0.5.1\npandas==2.0.0\n")
    assert "line 2: pandas==2.0.0 conflicts with pandas==" + pandas in caught.value.detail
    # The service's own version is accepted (and not added twice).
    requirements = parse_requirements(f"pandas=={pandas}\n".encode())
    assert sum(line.startswith("pandas==") for line in requirements.install_lines()) == 1


def test_a_requirements_file_over_64_kib_is_refused(tmp_path: Path) -> None:
    line = b"# padding" + b"x" * 100 + b"\n"
    (tmp_path / "requirements.txt").write_bytes(line * (MAX_REQUIREMENTS_BYTES // len(line) + 1))
    with pytest.raises(InvalidInput, match="at most 65536 \\(64 KiB\\)"):
        folder_requirements(tmp_path)
    (tmp_path / "requirements.txt").write_bytes(b"inflection==0.5.1\n")
    assert folder_requirements(tmp_path) is not None
    assert folder_requirements(tmp_path / "missing") is None


def test_the_environment_key_is_the_requirements_content() -> None:
    one = parse_requirements(b"inflection==0.5.1\nsix==1.17.0\n")
    same = parse_requirements(b"# reordered\nsix == 1.17.0\nINFLECTION==0.5.1   # comment\n")
    other = parse_requirements(b"inflection==0.5.0\nsix==1.17.0\n")
    assert one.env_key() == same.env_key()
    assert one.env_key() != other.env_key()
    assert len(one.env_key()) == 64
