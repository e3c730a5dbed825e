"""Dataset quality checks (spec §8), measured with Great Expectations.

Rules; QualityThresholds holds the §8 figures:

- row_count (error): at least 100 samples (rows); 100 passes.
- completeness (error): the share of non-null cells over the whole table, rows x columns, must
  be above 95 %; exactly 95 % fails. §8 speaks of "non-null values", not of columns, so this
  is one figure for the table.
- uniqueness (error): the share of distinct rows (distinct rows / rows) must be above 80 %;
  exactly 80 % fails.
- schema_compliance (error): 100 % compliance, so no row may violate the model's data-spec;
  the caller validates rows and passes the number of violating rows.
- column_completeness (warning, one per column): a column whose own non-null share is not
  above 95 %. A table can pass completeness while one of its columns is mostly empty; that
  is worth telling the contributor but is not a §8 rejection.

With DATA_VALIDATION_STRICT=true warnings fail the report as errors do. "Valid CSV/JSON/Parquet"
is decided by `pipeline.store.reading.read_dataset`, which raises UnreadableDataset before any
check runs; a hostile file fails there instead of exhausting memory.

Great Expectations counts rows and nulls (ExpectTableRowCountToBeBetween and
ExpectColumnValuesToNotBeNull per column, one suite, one pass over the frame). The "above"
decisions are made here on exact fractions, as GE's `mostly` is inclusive and works on floats.
Row uniqueness is computed with pandas: GE's ExpectCompoundColumnsToBeUnique marks every copy
of a repeated row as unexpected, so a table holding each row twice would score 0 % instead
of the 50 % of its rows that are distinct samples.

GE is imported lazily (about 3.4 s) and its ephemeral context is built once per process, with
progress bars off. GE 1.24 has no usage-statistics sender (checked in its source); its
analytics switch, GX_ANALYTICS_ENABLED, is still set to false before the import.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any, Literal

import pandas as pd

from pipeline.core.config import Settings

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class QualityThresholds:
    min_rows: int = 100  # at least
    completeness_above: float = 0.95
    uniqueness_above: float = 0.80
    max_schema_violations: int = 0  # at most
    column_completeness_above: float = 0.95


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    observed: float | int
    threshold: float | int
    severity: Severity
    column: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.column is None:
            del data["column"]
        return data


@dataclass(frozen=True)
class QualityReport:
    row_count: int
    completeness: float
    uniqueness: float
    schema_violations: int
    checks: list[CheckResult] = field(default_factory=list)
    strict: bool = False

    @property
    def failures(self) -> list[CheckResult]:
        """Checks that make the report fail: errors, and in strict mode warnings too."""
        return [
            check
            for check in self.checks
            if not check.passed and (check.severity == "error" or self.strict)
        ]

    @property
    def warnings(self) -> list[CheckResult]:
        return [check for check in self.checks if not check.passed and check.severity == "warning"]

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "strict": self.strict,
            "row_count": self.row_count,
            "completeness": self.completeness,
            "uniqueness": self.uniqueness,
            "schema_violations": self.schema_violations,
            "checks": [check.to_dict() for check in self.checks],
        }


def check_quality(
    df: pd.DataFrame,
    settings: Settings,
    schema_violations: int = 0,
    thresholds: QualityThresholds = QualityThresholds(),
) -> QualityReport:
    """Run the §8 checks on a dataset; `schema_violations` is the number of non-compliant rows."""
    if schema_violations < 0:
        raise ValueError("schema_violations must not be negative")
    rows, columns = df.shape
    row_count, nulls = _count_with_great_expectations(df, thresholds.min_rows)
    cells = rows * columns
    non_null = cells - sum(nulls)
    distinct = _distinct_rows(df)

    checks = [
        CheckResult(
            "row_count", row_count >= thresholds.min_rows, row_count, thresholds.min_rows, "error"
        ),
        CheckResult(
            "completeness",
            _above(non_null, cells, thresholds.completeness_above),
            _share(non_null, cells),
            thresholds.completeness_above,
            "error",
        ),
        CheckResult(
            "uniqueness",
            _above(distinct, rows, thresholds.uniqueness_above),
            _share(distinct, rows),
            thresholds.uniqueness_above,
            "error",
        ),
        CheckResult(
            "schema_compliance",
            schema_violations <= thresholds.max_schema_violations,
            schema_violations,
            thresholds.max_schema_violations,
            "error",
        ),
    ]
    if rows:
        # With no rows a column's share means nothing; the row_count error already says why.
        checks.extend(_column_checks(df, nulls, thresholds))
    return QualityReport(
        row_count=row_count,
        completeness=_share(non_null, cells),
        uniqueness=_share(distinct, rows),
        schema_violations=schema_violations,
        checks=checks,
        strict=settings.data_validation_strict,
    )


def _column_checks(
    df: pd.DataFrame, nulls: list[int], thresholds: QualityThresholds
) -> list[CheckResult]:
    """One completeness warning per column (`nulls`: each column's missing cells)."""
    rows = len(df)
    return [
        CheckResult(
            "column_completeness",
            _above(rows - null_count, rows, thresholds.column_completeness_above),
            _share(rows - null_count, rows),
            thresholds.column_completeness_above,
            "warning",
            column=str(name),
        )
        for name, null_count in zip(df.columns, nulls, strict=True)
    ]


# Measures.


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _above(part: int, whole: int, threshold: float) -> bool:
    # Fractions: 95 non-null cells out of 100 must not come out above 0.95 by rounding.
    return whole > 0 and Fraction(part, whole) > Fraction(str(threshold))


def _distinct_rows(df: pd.DataFrame) -> int:
    rows, columns = df.shape
    if not rows or not columns:
        return min(int(rows), 1)
    try:
        return int(rows - df.duplicated().sum())
    except TypeError:  # lists, dicts and arrays from JSON and Parquet are unhashable
        hashable = df.apply(lambda column: column.map(_hashable))
        return int(rows - hashable.duplicated().sum())


def _hashable(value: Any) -> Any:
    try:
        hash(value)
        return value
    except TypeError:
        return json.dumps(value, sort_keys=True, default=_plain)


def _plain(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else str(value)


# Great Expectations.

_gx_lock = threading.Lock()
_batch_definition: Any = None


def _count_with_great_expectations(df: pd.DataFrame, min_rows: int) -> tuple[int, list[int]]:
    """Row count and per-column null counts, in column order, from one GE suite run."""
    gx = _import_great_expectations()
    # GE needs unique string column names; positions map results back to any labels.
    keys = [f"c{i}" for i in range(df.shape[1])]
    frame = df.set_axis(keys, axis=1)
    suite = gx.ExpectationSuite(
        name="dataset_quality",
        expectations=[
            gx.expectations.ExpectTableRowCountToBeBetween(min_value=min_rows),
            *(gx.expectations.ExpectColumnValuesToNotBeNull(column=key) for key in keys),
        ],
    )
    # The batch definition is shared; GE keys loaded batches by id, and two frames validated at
    # once would share one, so validations take turns.
    with _gx_lock:
        batch = _frame_batch_definition().get_batch(batch_parameters={"dataframe": frame})
        outcome = batch.validate(suite, result_format="BASIC")
    row_count = len(df)
    nulls = dict.fromkeys(keys, 0)
    for result in outcome.results:
        config = result.expectation_config
        if config.type == "expect_table_row_count_to_be_between":
            row_count = int(result.result["observed_value"])
        else:
            nulls[config.kwargs["column"]] = int(result.result["unexpected_count"])
    return row_count, [nulls[key] for key in keys]


def _frame_batch_definition() -> Any:
    """The whole-dataframe batch definition of a process-wide ephemeral GE context."""
    global _batch_definition
    if _batch_definition is None:
        gx = _import_great_expectations()
        # Lazy like great_expectations itself (see `_import_great_expectations`).
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context = gx.get_context(mode="ephemeral")
        # Progress bars write to stderr on every validation: noise in services and tests.
        context.variables.progress_bars = ProgressBarsConfig(
            globally=False, metric_calculations=False
        )
        asset = context.data_sources.add_pandas("datasets").add_dataframe_asset("dataset")
        _batch_definition = asset.add_batch_definition_whole_dataframe("whole")
    return _batch_definition


def _import_great_expectations() -> Any:
    """great_expectations, imported on first use: it takes about 3.4 s, and the API and the CLI
    import this module."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations

    return great_expectations
