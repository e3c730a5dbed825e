"""Demo files for a model: a benchmark, a contribution that improves the model, and a manifest.

`make_demo_data` gives what `marketplace demo-data` writes. The rows come from one hidden
relationship between the features and the target, so a model trained on the contribution beats
the trivial baseline (majority class, or mean) on the benchmark by a clear margin:

- the demo model (`customer-churn`) uses its own generator (`pipeline.demo.churn_data`);
- the second demo model (`loan-default`) too (`pipeline.demo.loan_data`), and its benchmark
  carries a `split` column: a quarter of its rows (`train`) are the owner's base training data,
  so the contribution improves a model that is already trained, by a few percent;
- any other model with a flat data-spec gets rows drawn from the data-spec itself (ranges,
  enums, booleans) and a target computed from a seeded linear score of the features.

The contribution is built to pass every check the pipeline runs: it conforms to the data-spec,
is complete (every optional column filled), holds no duplicate rows and no row whose features
also appear in the benchmark (so it cannot be mistaken for leaked benchmark rows), carries no
PII, and its labels are each row's most likely outcome (no label noise). The benchmark's labels
are drawn from the relationship, with the noise a real test set has. Everything is seeded: the
same model and seed always give the same files.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.core.errors import InvalidInput
from pipeline.demo.churn_data import churn_probability, churn_rows
from pipeline.demo.loan_data import DEMO_LOAN_MODEL_NAME, loan_row, with_splits
from pipeline.models.dataspec import RowValidator
from pipeline.rewards.formula import to_checksum_address
from pipeline.rewards.manifests import parse_manifest

DEMO_MODEL_NAME = "customer-churn"
BENCHMARK_ROWS = 2000
# One contribution request of the CLI (its default batch size): one job, measured once.
CONTRIBUTION_ROWS = 1000
DEFAULT_SEED = 1
# The pipeline's minimum rows per contribution and per benchmark upload (spec §8).
MIN_CONTRIBUTION_ROWS = 100
MIN_BENCHMARK_ROWS = 50
# Draws without a new distinct row before giving up: a data-spec with few possible rows.
MAX_FUTILE_DRAWS = 10_000

Row = dict[str, Any]


@dataclass(frozen=True)
class DemoModel:
    """What the generator needs to know about a model (all of it public over the API)."""

    name: str
    task_type: str
    target_column: str
    data_spec: dict[str, Any]


@dataclass(frozen=True)
class DemoData:
    benchmark: list[Row]
    contribution: list[Row]
    manifest: dict[str, Any]
    columns: list[str]  # CSV column order: the data-spec's properties that the rows carry


def demo_wallet_key() -> str:
    """The demo wallet's private key: fixed, public, for a local chain only (never real tokens).
    `marketplace demo-data` writes it to DIR/wallet.key so the demo's reward can be claimed."""
    return "0x" + hashlib.sha256(b"data-marketplace demo wallet key").hexdigest()


def demo_wallet() -> str:
    """The demo manifest's wallet (EIP-55 spelling): the address of `demo_wallet_key()`."""
    from eth_account import Account

    return to_checksum_address(Account.from_key(demo_wallet_key()).address)


def demo_manifest(model: DemoModel, seed: int) -> dict[str, Any]:
    """A valid spec §2.5 manifest for the demo contribution."""
    manifest = {
        "contributor_id": "demo-supplier",
        "wallet_address": demo_wallet(),
        "data_description": f"Synthetic {model.name} rows made by `marketplace demo-data` "
        f"(seed {seed}) to try the marketplace end to end.",
        "data_source": "synthetic: made by pipeline/demo for the model's data-spec",
        "license": "CC0-1.0",
    }
    parse_manifest(manifest)
    return manifest


def make_demo_data(
    model: DemoModel,
    *,
    seed: int = DEFAULT_SEED,
    benchmark_rows: int = BENCHMARK_ROWS,
    contribution_rows: int = CONTRIBUTION_ROWS,
) -> DemoData:
    """Benchmark and contribution rows for `model`, disjoint, both valid against its data-spec.

    InvalidInput when the data-spec has a required property no generator can fill (see
    `property_sampler`) or the target cannot be learned from the others.
    """
    if benchmark_rows < MIN_BENCHMARK_ROWS:
        raise InvalidInput(f"a benchmark needs at least {MIN_BENCHMARK_ROWS} rows")
    if contribution_rows < MIN_CONTRIBUTION_ROWS:
        raise InvalidInput(f"a contribution needs at least {MIN_CONTRIBUTION_ROWS} rows")
    draw = _demo_draw(model)
    target = model.target_column
    # Separate streams: the benchmark and the contribution never share a random sequence.
    taken: set[Features] = set()
    benchmark = _distinct(draw, random.Random(f"benchmark/{seed}"), benchmark_rows, taken, target)
    contribution = _distinct(
        draw, random.Random(f"contribution/{seed}"), contribution_rows, taken, target, likely=True
    )
    validator = RowValidator(model.data_spec)
    for name, rows in (("benchmark", benchmark), ("contribution", contribution)):
        errors = validator.errors_for(rows)
        if errors:  # a generator bug, never the user's: say where
            raise InvalidInput(f"demo {name} row fails the data-spec: {errors[0].path}: "
                               f"{errors[0].message}")  # fmt: skip
    columns = [name for name in model.data_spec.get("properties", {}) if name in benchmark[0]]
    if draw is loan_row:
        benchmark = with_splits(benchmark)
        columns.append("split")
    return DemoData(benchmark, contribution, demo_manifest(model, seed), columns)


Features = tuple[tuple[str, Any], ...]
Draw = Callable[[random.Random, bool], Row]


def _distinct(
    draw: Draw,
    rng: random.Random,
    count: int,
    taken: set[Features],
    target: str,
    likely: bool = False,
) -> list[Row]:
    """`count` rows whose features (all but `target`) are new: not in `taken`, not repeated.

    `taken` grows with them, so rows drawn later never repeat these features either.
    """
    rows: list[Row] = []
    futile = 0
    while len(rows) < count:
        row = draw(rng, likely)
        key = tuple(sorted((k, v) for k, v in row.items() if k != target))
        if key in taken:
            futile += 1
            if futile > MAX_FUTILE_DRAWS:
                raise InvalidInput(
                    f"the data-spec allows too few distinct rows for {count} demo rows"
                )
            continue
        futile = 0
        taken.add(key)
        rows.append(row)
    return rows


# --- the demo model ---------------------------------------------------------------------------


def _demo_draw(model: DemoModel) -> Draw:
    """The demo model's own generator when `model` is one of them, else the data-spec's."""
    properties = set(model.data_spec.get("properties", {}))
    churn = churn_rows(1, seed=0)[0]
    if (
        model.name == DEMO_MODEL_NAME
        and model.target_column == "churned"
        and set(churn) <= properties
    ):
        return _churn_draw
    loan = loan_row(random.Random(0))
    if (
        model.name == DEMO_LOAN_MODEL_NAME
        and model.target_column == "defaulted"
        and set(loan) <= properties
    ):
        return loan_row
    return SpecGenerator(model).draw


def _churn_draw(rng: random.Random, likely: bool) -> Row:
    row = churn_rows(1, seed=rng.getrandbits(64))[0]
    if likely:
        row["churned"] = int(churn_probability(row) >= 0.5)
    return row


# --- any flat data-spec -----------------------------------------------------------------------

Sampler = Callable[[random.Random], Any]


@dataclass(frozen=True)
class Feature:
    """A generated column and its share of the hidden score."""

    name: str
    sample: Sampler
    effect: Callable[[Any], float]


def _non_null_type(spec: dict[str, Any]) -> str | None:
    kind = spec.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        return kinds[0] if len(kinds) == 1 else None
    return kind if isinstance(kind, str) else None


def _bounds(spec: dict[str, Any], low: float, high: float) -> tuple[float, float]:
    low = float(spec.get("minimum", spec.get("exclusiveMinimum", low)))
    high = float(spec.get("maximum", spec.get("exclusiveMaximum", high)))
    if "minimum" not in spec and "maximum" in spec:
        low = min(low, high - 100.0)
    if "maximum" not in spec and "minimum" in spec:
        high = max(high, low + 100.0)
    return low, high


def property_sampler(name: str, spec: dict[str, Any]) -> tuple[Sampler, list[Any] | None]:
    """How to draw values of one property, and its categories (None for a numeric one).

    Supported: `enum`, `boolean`, `integer` and `number` (with their bounds), `string` without
    a `format` or `pattern` (short codes). Anything else raises InvalidInput naming the property.
    """
    unsupported = next((k for k in ("format", "pattern", "const", "$ref") if k in spec), None)
    if unsupported:
        raise InvalidInput(f"cannot generate values for {name!r} (it has {unsupported!r})")
    values = spec.get("enum")
    if isinstance(values, list):
        choices = [v for v in values if v is not None]
        if not choices:
            raise InvalidInput(f"cannot generate values for {name!r} (an enum of null only)")
        return (lambda rng: rng.choice(choices)), choices
    kind = _non_null_type(spec)
    if kind == "boolean":
        return (lambda rng: rng.random() < 0.5), [False, True]
    if kind == "integer":
        low, high = _bounds(spec, 0, 100)
        first = math.floor(low) + 1 if "exclusiveMinimum" in spec else math.ceil(low)
        last = math.ceil(high) - 1 if "exclusiveMaximum" in spec else math.floor(high)
        if first > last:
            raise InvalidInput(f"cannot generate values for {name!r} (an empty range)")
        return (lambda rng: rng.randint(first, last)), None
    if kind == "number":
        low, high = _bounds(spec, 0.0, 1000.0)
        span = high - low
        # Two decimals, kept a hundredth inside exclusive bounds.
        inner_low = low + 0.01 if "exclusiveMinimum" in spec else low
        inner_high = high - 0.01 if "exclusiveMaximum" in spec else high
        if span <= 0.02 or inner_low > inner_high:
            raise InvalidInput(f"cannot generate values for {name!r} (an empty range)")
        return (lambda rng: round(rng.uniform(inner_low, inner_high), 2)), None
    if kind == "string":
        length = max(2, int(spec.get("minLength", 2)))
        if length > int(spec.get("maxLength", length)):
            raise InvalidInput(f"cannot generate values for {name!r} (its length limits)")
        codes = [f"{letter}{'x' * (length - 1)}" for letter in "abcdef"]
        return (lambda rng: rng.choice(codes)), codes
    raise InvalidInput(f"cannot generate values for {name!r} (type {spec.get('type')!r})")


class SpecGenerator:
    """Rows for any flat data-spec, with a target that a linear model can learn.

    Each feature adds a fixed random effect to a hidden score (a numeric one in proportion to
    where its value lies in its range, a categorical one per category). A classification target
    is the class whose score band the row falls in (bands cut at the score's quantiles, so the
    classes are about equally common); a regression target is a linear function of the score.
    Benchmark rows get label noise (a random class for one row in ten, Gaussian noise on a
    regression target); contribution rows get the noise-free label.
    """

    def __init__(self, model: DemoModel) -> None:
        properties: dict[str, Any] = model.data_spec.get("properties", {})
        if model.target_column not in properties:
            raise InvalidInput(f"the target column {model.target_column!r} is not in the data-spec")
        required = set(model.data_spec.get("required", []))
        # The hidden relationship is the model's own: seeded by its name, not by the caller.
        signal = random.Random(f"signal/{model.name}")
        self.features: list[Feature] = []
        for name, spec in properties.items():
            if name == model.target_column:
                continue
            try:
                sample, categories = property_sampler(name, spec if isinstance(spec, dict) else {})
            except InvalidInput:
                if name in required:
                    raise
                continue  # optional and not generatable: the rows leave it out
            self.features.append(Feature(name, sample, _effect(spec, categories, signal)))
        if not self.features:
            raise InvalidInput("the data-spec has no feature the demo generator can fill")
        self.target = model.target_column
        self.task_type = model.task_type
        target_spec = properties[model.target_column]
        reference = [self._score(self._features(signal)) for _ in range(2000)]
        if model.task_type == "classification":
            self.classes = _target_classes(model.target_column, target_spec)
            ordered = sorted(reference)
            k = len(self.classes)
            self.cuts = [ordered[len(ordered) * i // k] for i in range(1, k)]
        else:
            self._regression_target(target_spec, reference)

    def _regression_target(self, spec: dict[str, Any], reference: Sequence[float]) -> None:
        kind = _non_null_type(spec)
        if kind not in {"number", "integer"}:
            raise InvalidInput(f"a regression target must be a number; {self.target!r} is not")
        low, high = _bounds(spec, 0.0, 1000.0)
        mean = math.fsum(reference) / len(reference)
        spread = math.sqrt(math.fsum((s - mean) ** 2 for s in reference) / len(reference)) or 1.0
        # About ±2.5 standard deviations of the score fill the target's range.
        self.center, self.scale = (low + high) / 2, (high - low) / 5 / spread
        self.offset = mean
        self.low, self.high, self.integer = low, high, kind == "integer"

    def _features(self, rng: random.Random) -> Row:
        return {feature.name: feature.sample(rng) for feature in self.features}

    def _score(self, row: Row) -> float:
        return math.fsum(feature.effect(row[feature.name]) for feature in self.features)

    def draw(self, rng: random.Random, likely: bool) -> Row:
        row = self._features(rng)
        score = self._score(row)
        if self.task_type == "classification":
            band = sum(score >= cut for cut in self.cuts)
            if not likely and rng.random() < 0.1:
                band = rng.randrange(len(self.classes))
            row[self.target] = self.classes[band]
            return row
        value = self.center + (score - self.offset) * self.scale
        if not likely:
            value += rng.gauss(0.0, (self.high - self.low) / 50)
        value = min(self.high, max(self.low, value))
        row[self.target] = round(value) if self.integer else round(value, 4)
        return row


def _effect(
    spec: dict[str, Any], categories: list[Any] | None, signal: random.Random
) -> Callable[[Any], float]:
    if categories is not None:
        effects = {repr(value): signal.gauss(0.0, 1.0) for value in categories}
        return lambda value: effects[repr(value)]
    low, high = _bounds(spec, 0.0, 100.0)
    weight = signal.gauss(0.0, 1.0)
    middle, half = (low + high) / 2, (high - low) / 2 or 1.0
    return lambda value: weight * (value - middle) / half


def _target_classes(name: str, spec: dict[str, Any]) -> list[Any]:
    values = spec.get("enum")
    if isinstance(values, list) and len([v for v in values if v is not None]) >= 2:
        return [v for v in values if v is not None]
    kind = _non_null_type(spec)
    if kind == "boolean":
        return [False, True]
    if kind == "integer" and "minimum" in spec and "maximum" in spec:
        low, high = int(spec["minimum"]), int(spec["maximum"])
        if 2 <= high - low + 1 <= 10:
            return list(range(low, high + 1))
    raise InvalidInput(
        f"cannot generate labels for {name!r}: a classification target needs an enum, a boolean "
        "or a small integer range"
    )
