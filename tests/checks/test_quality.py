"""Dataset quality thresholds (spec §8) and dataset file reading."""

from __future__ import annotations

import json
import socket
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pipeline.checks import quality
from pipeline.checks.quality import (
    QualityReport,
    QualityThresholds,
    check_quality,
)
from pipeline.core.config import Settings


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(marketplace_data_dir=tmp_path_factory.mktemp("quality"))


@pytest.fixture(scope="module")
def strict_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(
        marketplace_data_dir=tmp_path_factory.mktemp("quality-strict"), data_validation_strict=True
    )


def dataset(rows: int = 100, nulls: int = 0, duplicates: int = 0) -> pd.DataFrame:
    """`rows` rows of (id, value): `nulls` empty values, the last `duplicates` rows repeated."""
    ids = list(range(rows - duplicates)) + list(range(duplicates))
    values: list[float | None] = [float(i) for i in ids]
    for index in range(rows - duplicates - nulls, rows - duplicates):
        values[index] = None
    return pd.DataFrame({"id": ids, "value": values})


def check(report: QualityReport, name: str) -> quality.CheckResult:
    (result,) = [c for c in report.checks if c.name == name]
    return result


# Row count: at least 100 samples.


def test_99_rows_fail_the_row_count(settings: Settings) -> None:
    report = check_quality(dataset(rows=99), settings)

    assert report.row_count == 99
    assert not check(report, "row_count").passed
    assert not report.passed


def test_100_rows_pass_the_row_count(settings: Settings) -> None:
    report = check_quality(dataset(rows=100), settings)

    assert report.row_count == 100
    assert check(report, "row_count").passed
    assert report.passed


# Completeness: above 95 % non-null cells over the table.


def test_exactly_95_percent_complete_fails(settings: Settings) -> None:
    report = check_quality(dataset(rows=100, nulls=10), settings)  # 190 of 200 cells

    assert report.completeness == pytest.approx(0.95)
    assert not check(report, "completeness").passed
    assert not report.passed


def test_96_percent_complete_passes(settings: Settings) -> None:
    report = check_quality(dataset(rows=100, nulls=8), settings)  # 192 of 200 cells

    assert report.completeness == pytest.approx(0.96)
    assert check(report, "completeness").passed
    assert report.passed


# Uniqueness: above 80 % distinct rows.


def test_exactly_80_percent_unique_rows_fails(settings: Settings) -> None:
    report = check_quality(dataset(rows=100, duplicates=20), settings)

    assert report.uniqueness == pytest.approx(0.80)
    assert not check(report, "uniqueness").passed
    assert not report.passed


def test_81_percent_unique_rows_passes(settings: Settings) -> None:
    report = check_quality(dataset(rows=100, duplicates=19), settings)

    assert report.uniqueness == pytest.approx(0.81)
    assert check(report, "uniqueness").passed
    assert report.passed


def test_uniqueness_counts_each_distinct_row_once(settings: Settings) -> None:
    # Every row twice: half the rows are distinct samples (GE's compound check would say 0 %).
    df = pd.concat([dataset(rows=100), dataset(rows=100)], ignore_index=True)

    assert check_quality(df, settings).uniqueness == pytest.approx(0.5)


def test_uniqueness_handles_nested_json_values(settings: Settings) -> None:
    df = pd.DataFrame(
        {
            "tags": [["a", str(i)] for i in range(90)] + [["a", "0"]] * 10,
            "meta": [{"k": i} for i in range(90)] + [{"k": 0}] * 10,
            "emb": [np.array([i, 1]) for i in range(90)] + [np.array([0, 1])] * 10,
        }
    )

    assert check_quality(df, settings).uniqueness == pytest.approx(0.90)


# Schema compliance: 100 %.


def test_one_schema_violation_fails(settings: Settings) -> None:
    clean = check_quality(dataset(), settings, schema_violations=0)
    violated = check_quality(dataset(), settings, schema_violations=1)

    assert clean.passed
    assert not violated.passed
    assert [c.name for c in violated.failures] == ["schema_compliance"]


def test_negative_schema_violations_are_rejected(settings: Settings) -> None:
    with pytest.raises(ValueError):
        check_quality(dataset(), settings, schema_violations=-1)


# Warnings and strict mode.


def sparse_column_frame() -> pd.DataFrame:
    """500 cells, 10 null, all in one column: the table is 98 % complete, that column 90 %."""
    df = pd.DataFrame({f"f{i}": range(100) for i in range(4)})
    df["sparse"] = [None] * 10 + [float(i) for i in range(90)]
    return df


def test_sparse_column_is_a_warning_by_default(settings: Settings) -> None:
    report = check_quality(sparse_column_frame(), settings)

    assert check(report, "completeness").passed
    assert report.passed
    (warning,) = report.warnings
    assert (warning.name, warning.column, warning.severity) == (
        "column_completeness",
        "sparse",
        "warning",
    )
    assert warning.observed == pytest.approx(0.90)


def test_strict_mode_turns_the_warning_into_a_failure(strict_settings: Settings) -> None:
    report = check_quality(sparse_column_frame(), strict_settings)

    assert not report.passed
    assert [(c.name, c.column) for c in report.failures] == [("column_completeness", "sparse")]


def test_strict_mode_passes_a_clean_dataset(strict_settings: Settings) -> None:
    assert check_quality(dataset(), strict_settings).passed


def test_custom_thresholds_are_honoured(settings: Settings) -> None:
    report = check_quality(dataset(rows=60), settings, thresholds=QualityThresholds(min_rows=50))

    assert report.passed


def test_report_is_json_friendly(settings: Settings) -> None:
    report = check_quality(sparse_column_frame(), settings)

    data = json.loads(json.dumps(report.to_dict()))

    assert data["passed"] is True
    assert data["row_count"] == 100
    names = [c["name"] for c in data["checks"]]
    assert names[:4] == ["row_count", "completeness", "uniqueness", "schema_compliance"]
    assert {"name", "passed", "observed", "threshold", "severity"} <= set(data["checks"][0])


def test_odd_column_labels_and_empty_frames(settings: Settings) -> None:
    df = pd.DataFrame([[1, 2, 3]] * 3, columns=[0, "0", "a b"])  # not GE-friendly names

    report = check_quality(df, settings)

    assert [c.column for c in report.checks if c.column is not None] == ["0", "0", "a b"]
    empty = check_quality(pd.DataFrame(), settings)
    assert (empty.row_count, empty.completeness, empty.passed) == (0, 0.0, False)


def test_great_expectations_is_quiet_and_offline(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    attempts: list[Any] = []
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        if isinstance(address, tuple) and address[0] not in {"127.0.0.1", "::1", "localhost"}:
            attempts.append(address)
            raise OSError("test forbids network access")
        real_connect(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in {None, "127.0.0.1", "::1", "localhost"}:
            attempts.append(host)
            raise OSError("test forbids network access")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(quality, "_batch_definition", None)  # build the context under the guard

    report = check_quality(dataset(), settings)

    assert report.passed
    assert attempts == []
    err = capfd.readouterr().err
    assert "Calculating Metrics" not in err
    assert "it/s" not in err
