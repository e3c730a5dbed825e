"""Reward tokens: wallet addresses, contributor manifests, the reward formula and its split.

One reward token stands for a 1 % improvement of the model's benchmark score (spec §1), scaled
by three factors in [0, 1] for data quality, volume and uniqueness, so a complete, fully unique
dataset of 10,000 rows or more earns exactly one token per 1 %:

    base_tokens       = improvement_pct                      (1 token per 1 %)
    quality_factor    = completeness                         (share of non-null values)
    volume_factor     = min(1, log10(rows) / log10(10,000))  (100 rows 0.5, 1,000 rows 0.75)
    uniqueness_factor = uniqueness                           (share of unique rows)
    total_tokens      = round(base_tokens * quality_factor * volume_factor
                              * uniqueness_factor, 6)

The total is 0 when the improvement is not positive or the contribution failed its quality
checks (spec §8: at least 100 rows, completeness above 95 %, uniqueness above 80 %).

In the pipeline (`pipeline.rewards.payouts`), `improvement_pct` is the contribution's Shapley share
of its batch's floored improvement (`pipeline.rewards.valuation`), `rows` are the rows the valuation
accepted in the whole batch (so a dataset cut into pieces earns what it would whole), and
`uniqueness` is the share of rows new to the model's accepted data when the integrity check
measured it, else the share of unique rows within the contribution. The result is then capped
per contribution and per model and day (docs/rewards.md).

Worked example: a contribution of 1,000 rows, 98 % complete and 90 % unique, that passed its
checks and raised the benchmark accuracy from 0.80 to 0.90, a 12.5 % improvement:

    base_tokens       = 12.5
    quality_factor    = 0.98
    volume_factor     = min(1, log10(1000) / log10(10000)) = 3 / 4 = 0.75
    uniqueness_factor = 0.9
    total_tokens      = round(12.5 * 0.98 * 0.75 * 0.9, 6) = 8.26875

Shared 0.6 / 0.4 between two contributors of its manifest, that is 4.96125 and 3.3075 tokens.
Tokens are counted in millionths: a split always adds up to the total to the last millionth.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from Crypto.Hash import keccak
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from pipeline.core.errors import InvalidInput
from pipeline.core.text import END

if TYPE_CHECKING:
    from pipeline.store.objectstore import ObjectStore

TOKEN_DECIMALS = 6
_TOKEN_UNITS = 10**TOKEN_DECIMALS

# Row count at which the volume factor reaches 1.
FULL_VOLUME_ROWS = 10_000

# Weights are fractions written by people and tools; this absorbs their decimal rounding
# (three thirds written as 0.333333 each) without accepting shares that are really off.
WEIGHT_SUM_TOLERANCE = 1e-6

MANIFEST_FILENAME = "manifest.json"
MANIFEST_MAX_BYTES = 1024 * 1024

_WALLET = re.compile(r"0x[0-9a-fA-F]{40}")
# The spellings that need no checksum, as a JSON Schema pattern: all lower or all upper case.
# A mixed-case address is accepted too when it is the EIP-55 checksum spelling, which no
# pattern can state.
WALLET_PATTERN = rf"^0x(?:[0-9a-f]{{40}}|[0-9A-F]{{40}}){END}"
WALLET_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": WALLET_PATTERN,
    "description": "Ethereum address: 0x + 40 hex digits in one case, or the EIP-55 "
    "checksummed mixed-case spelling",
}

# Common SPDX license identifiers for datasets and code (https://spdx.org/licenses/).
# A license not listed is named the way SPDX provides for that, `LicenseRef-<name>`
# (for example `LicenseRef-Proprietary`); SPDX expressions such as "MIT OR Apache-2.0" are
# not accepted: one identifier per manifest.
SPDX_LICENSES: tuple[str, ...] = (
    "CC0-1.0",
    "CC-BY-3.0",
    "CC-BY-4.0",
    "CC-BY-SA-3.0",
    "CC-BY-SA-4.0",
    "CC-BY-NC-4.0",
    "CC-BY-NC-SA-4.0",
    "CC-BY-ND-4.0",
    "CC-BY-NC-ND-4.0",
    "PDDL-1.0",
    "ODC-By-1.0",
    "ODbL-1.0",
    "CDLA-Permissive-1.0",
    "CDLA-Permissive-2.0",
    "CDLA-Sharing-1.0",
    "OGL-UK-3.0",
    "MIT",
    "Apache-2.0",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "MPL-2.0",
    "GPL-3.0-only",
    "GPL-3.0-or-later",
    "LGPL-3.0-only",
    "Unlicense",
)
# SPDX identifiers match case-insensitively; the canonical spelling is what gets stored.
_LICENSES_BY_KEY = {license.lower(): license for license in SPDX_LICENSES}
_LICENSE_REF = re.compile(r"LicenseRef-[A-Za-z0-9.\-]+", re.IGNORECASE)
LICENSE_SCHEMA: dict[str, Any] = {
    "type": "string",
    "anyOf": [
        {"enum": list(SPDX_LICENSES)},
        {"pattern": rf"^LicenseRef-[A-Za-z0-9.\-]+{END}"},
    ],
    "description": "SPDX identifier (matched in any letter case) or LicenseRef-<name>",
}


def _schema(by: dict[str, Any]) -> Any:
    """A `json_schema_extra` that states a field's rule in place of pydantic's plain type."""

    def replace(schema: dict[str, Any]) -> None:
        schema.clear()
        schema.update(by)

    return replace


# --- wallets -------------------------------------------------------------------------------


def to_checksum_address(address: str) -> str:
    """The EIP-55 mixed-case spelling of an address given in any case."""
    if not isinstance(address, str) or not _WALLET.fullmatch(address):
        raise InvalidInput("wallet address must be 0x followed by 40 hexadecimal characters")
    hex_digits = address[2:].lower()
    digest = keccak.new(digest_bits=256, data=hex_digits.encode("ascii")).hexdigest()
    return "0x" + "".join(
        c.upper() if c.isalpha() and int(d, 16) >= 8 else c
        for c, d in zip(hex_digits, digest, strict=False)
    )


def validate_wallet(address: str) -> str:
    """Return `address` unchanged if it is a valid Ethereum address, else raise InvalidInput.

    All-lowercase and all-uppercase addresses carry no checksum and are accepted as they are;
    a mixed-case address must be the EIP-55 checksum spelling, which catches mistyped letters.
    """
    checksummed = to_checksum_address(address)
    hex_digits = address[2:]
    mixed_case = hex_digits != hex_digits.lower() and hex_digits != hex_digits.upper()
    if mixed_case and address != checksummed:
        raise InvalidInput("wallet address has an invalid EIP-55 checksum (mixed-case spelling)")
    return address


def _checked_wallet(address: str) -> str:
    try:
        return validate_wallet(address)
    except InvalidInput as exc:
        raise PydanticCustomError("wallet", exc.detail) from None


# --- manifests -----------------------------------------------------------------------------


class ContributorShare(BaseModel):
    """One contributor of a multi-contributor dataset and their share of its rewards."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1, max_length=200)
    wallet_address: str = Field(json_schema_extra=_schema(WALLET_SCHEMA))
    # Strict: a boolean or a numeric string is a mistake in the file, not a weight.
    weight: float = Field(gt=0, le=1, strict=True, allow_inf_nan=False)

    @field_validator("wallet_address")
    @classmethod
    def _valid_wallet(cls, value: str) -> str:
        return _checked_wallet(value)


def _at_least_one(schema: dict[str, Any]) -> None:
    """The array branch of `contributors` (`list | None`) needs one entry when present."""
    for branch in schema.get("anyOf", []):
        if branch.get("type") == "array":
            branch["minItems"] = 1


class ContributorManifest(BaseModel):
    """The contributor manifest of spec §2.5."""

    # Client tooling may add its own fields; they are kept in the stored JSON, ignored here.
    model_config = ConfigDict(extra="ignore")

    contributor_id: str = Field(min_length=1, max_length=200)
    wallet_address: str = Field(json_schema_extra=_schema(WALLET_SCHEMA))
    data_description: str = Field(min_length=1, max_length=10_000)
    data_source: str = Field(min_length=1, max_length=2_000)
    license: str = Field(json_schema_extra=_schema(LICENSE_SCHEMA))
    # Weights must also sum to 1 and ids be distinct, which JSON Schema cannot state.
    contributors: list[ContributorShare] | None = Field(
        default=None,
        description="several contributors: distinct ids, weights summing to 1",
        json_schema_extra=_at_least_one,
    )

    @field_validator("wallet_address")
    @classmethod
    def _valid_wallet(cls, value: str) -> str:
        return _checked_wallet(value)

    @field_validator("license")
    @classmethod
    def _known_license(cls, value: str) -> str:
        canonical = _LICENSES_BY_KEY.get(value.lower())
        if canonical is not None:
            return canonical
        if _LICENSE_REF.fullmatch(value):
            return "LicenseRef-" + value[len("LicenseRef-") :]
        raise PydanticCustomError(
            "license",
            "unknown license identifier: use an SPDX identifier ({known}) "
            "or LicenseRef-<name> for another license",
            {"known": ", ".join(SPDX_LICENSES)},
        )

    @field_validator("contributors")
    @classmethod
    def _shares_add_up(cls, shares: list[ContributorShare] | None) -> list[ContributorShare] | None:
        # A field validator, not a model one: pydantic then reports these problems together
        # with those of the other fields instead of only once every field is valid.
        if shares is None:
            return shares
        if not shares:
            raise PydanticCustomError(
                "contributors", "contributors must list at least one contributor when present"
            )
        problems: list[str] = []
        ids = [share.id for share in shares]
        repeated = sorted({i for i in ids if ids.count(i) > 1}, key=ids.index)
        problems.extend(f"contributor id '{i}' appears more than once" for i in repeated)
        total = math.fsum(share.weight for share in shares)
        if abs(total - 1.0) > WEIGHT_SUM_TOLERANCE:
            problems.append(f"contributor weights must sum to 1 (they sum to {round(total, 9)})")
        if problems:
            raise PydanticCustomError("contributors", ", and ".join(problems))
        return shares


@dataclass(frozen=True)
class ManifestProblem:
    """One thing wrong with a manifest: where (`license`, `contributors[1].weight`; "" for the
    manifest as a whole) and what."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class InvalidManifest(InvalidInput):
    """A manifest that cannot be used; `detail` names every problem, `problems` lists them."""

    def __init__(self, problems: Sequence[ManifestProblem]) -> None:
        super().__init__("manifest: " + "; ".join(str(problem) for problem in problems))
        self.problems = list(problems)


def parse_manifest(data: Any) -> ContributorManifest:
    """Validate a contributor manifest (spec §2.5), the one check every reader uses.

    Every problem is found in one pass and raised together as InvalidManifest, so a person
    fixing a manifest sees all of them at once rather than one per try.
    """
    if not isinstance(data, dict):
        raise InvalidManifest([ManifestProblem("", "must be a JSON object")])
    try:
        return ContributorManifest.model_validate(data)
    except ValidationError as exc:
        raise InvalidManifest(
            [ManifestProblem(_location(error["loc"]), error["msg"]) for error in exc.errors()]
        ) from None


def decode_manifest(raw: bytes) -> dict[str, Any]:
    """The JSON object in the bytes of a `manifest.json`; InvalidManifest when there is none.

    Only the file's form is checked here; `parse_manifest` checks its content.
    """
    if len(raw) > MANIFEST_MAX_BYTES:
        raise InvalidManifest(
            [ManifestProblem("", f"the file is larger than {MANIFEST_MAX_BYTES} bytes")]
        )
    try:
        data = json.loads(raw)
    except ValueError:  # UnicodeDecodeError is a ValueError too
        raise InvalidManifest([ManifestProblem("", "the file is not valid JSON")]) from None
    if not isinstance(data, dict):
        raise InvalidManifest([ManifestProblem("", "the file is not a JSON object")])
    return data


def read_manifest_file(store: ObjectStore, key: str) -> dict[str, Any] | None:
    """The JSON object of the stored `manifest.json` at `key`; None when there is no such file.

    A file that exists but cannot be read or decoded raises InvalidManifest.
    """
    try:
        if not store.exists(key):
            return None
        with store.open(key) as fh:
            raw = fh.read(MANIFEST_MAX_BYTES + 1)
    except OSError as exc:
        raise InvalidManifest(
            [ManifestProblem("", f"the file could not be read ({type(exc).__name__})")]
        ) from None
    return decode_manifest(raw)


def _location(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def recipients(manifest: ContributorManifest) -> list[tuple[str, float]]:
    """Who is paid for a contribution, with their weights (summing to 1).

    Without a contributors list the manifest's own wallet takes everything. A wallet listed
    for several contributors is paid once, with their weights added, under its first spelling,
    because the reward ledger holds one entry per wallet and evaluation.
    """
    if not manifest.contributors:
        return [(manifest.wallet_address, 1.0)]
    merged: dict[str, tuple[str, float]] = {}
    for share in manifest.contributors:
        key = share.wallet_address.lower()
        wallet, weight = merged.get(key, (share.wallet_address, 0.0))
        merged[key] = (wallet, weight + share.weight)
    return list(merged.values())


# --- reward formula ------------------------------------------------------------------------


@dataclass(frozen=True)
class QualityFactors:
    """What the quality checks measured on a contribution."""

    completeness: float  # share of non-null values, 0..1
    uniqueness: float  # share of unique rows, 0..1
    row_count: int
    passed: bool  # every quality check of spec §8 passed

    def __post_init__(self) -> None:
        for name in ("completeness", "uniqueness"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
                raise InvalidInput(f"{name} must be a number between 0 and 1")
        if isinstance(self.row_count, bool) or not isinstance(self.row_count, int):
            raise InvalidInput("row_count must be an integer")
        if self.row_count < 0:
            raise InvalidInput("row_count must not be negative")


@dataclass(frozen=True)
class RewardBreakdown:
    """A reward and the terms it was computed from (see the module docstring)."""

    base_tokens: float
    quality_factor: float
    volume_factor: float
    uniqueness_factor: float
    total_tokens: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def volume_factor(row_count: int) -> float:
    """0 for no rows, 0.5 for 100, 0.75 for 1,000, 1 from 10,000 rows on."""
    if row_count < 1:
        return 0.0
    return min(1.0, math.log10(row_count) / math.log10(FULL_VOLUME_ROWS))


def compute_reward(improvement_pct: float, quality: QualityFactors) -> RewardBreakdown:
    """The tokens a contribution earns for improving the benchmark by `improvement_pct` %.

    `base_tokens` is the improvement itself (0 when it is not positive) and the factors are
    always reported, so a failed contribution still shows what it measured; only
    `total_tokens` is forced to 0 when the quality checks failed.
    """
    if not math.isfinite(improvement_pct):
        raise InvalidInput("improvement_pct must be a finite number")
    base = round(max(improvement_pct, 0.0), TOKEN_DECIMALS)
    factors = (quality.completeness, volume_factor(quality.row_count), quality.uniqueness)
    total = round(base * math.prod(factors), TOKEN_DECIMALS) if quality.passed else 0.0
    return RewardBreakdown(
        base_tokens=base,
        quality_factor=float(factors[0]),
        volume_factor=factors[1],
        uniqueness_factor=float(factors[2]),
        total_tokens=total,
    )


def split_reward(total: float, shares: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """Share `total` tokens among wallets by weight, in the order given.

    Works in millionths of a token (largest remainder): each wallet gets its weight's share
    rounded down, and the millionths left over go one each to the largest remainders, ties to
    the wallet listed first. The parts therefore add up to `total` (rounded to 6 decimals)
    exactly in millionths, and the same input always splits the same way. Weights need not
    sum to 1; they are used in proportion.
    """
    if not math.isfinite(total) or total < 0:
        raise InvalidInput("total tokens must be a finite number not below 0")
    if not shares:
        raise InvalidInput("a reward needs at least one recipient")
    seen: set[str] = set()
    for wallet, weight in shares:
        validate_wallet(wallet)
        if wallet.lower() in seen:
            raise InvalidInput("a wallet may appear only once among the recipients")
        seen.add(wallet.lower())
        if not (math.isfinite(weight) and weight > 0):
            raise InvalidInput("recipient weights must be positive numbers")
    units = round(total * _TOKEN_UNITS)
    # Exact rationals: float shares could tie or misorder remainders and lose a millionth.
    weights = [Fraction(weight) for _, weight in shares]
    exact = [units * w / sum(weights) for w in weights]
    parts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(shares)), key=lambda i: (parts[i] - exact[i], i))
    for i in by_remainder[: units - sum(parts)]:
        parts[i] += 1
    return [(wallet, part / _TOKEN_UNITS) for (wallet, _), part in zip(shares, parts, strict=True)]
