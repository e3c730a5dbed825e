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

In the pipeline (`pipeline.payouts`), `improvement_pct` is the contribution's Shapley share of
its batch's floored improvement (`pipeline.valuation`), `rows` are the rows the valuation
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

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from Crypto.Hash import keccak
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from pipeline.errors import InvalidInput

TOKEN_DECIMALS = 6
_TOKEN_UNITS = 10**TOKEN_DECIMALS

# Row count at which the volume factor reaches 1.
FULL_VOLUME_ROWS = 10_000

# Weights are fractions written by people and tools; this absorbs their decimal rounding
# (three thirds written as 0.333333 each) without accepting shares that are really off.
WEIGHT_SUM_TOLERANCE = 1e-6

_WALLET = re.compile(r"0x[0-9a-fA-F]{40}")

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
    wallet_address: str
    # Strict: a boolean or a numeric string is a mistake in the file, not a weight.
    weight: float = Field(gt=0, le=1, strict=True, allow_inf_nan=False)

    @field_validator("wallet_address")
    @classmethod
    def _valid_wallet(cls, value: str) -> str:
        return _checked_wallet(value)


class ContributorManifest(BaseModel):
    """The contributor manifest of spec §2.5."""

    # Client tooling may add its own fields; they are kept in the stored JSON, ignored here.
    model_config = ConfigDict(extra="ignore")

    contributor_id: str = Field(min_length=1, max_length=200)
    wallet_address: str
    data_description: str = Field(min_length=1, max_length=10_000)
    data_source: str = Field(min_length=1, max_length=2_000)
    license: str
    contributors: list[ContributorShare] | None = None

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
            "unknown license identifier; use an SPDX identifier ({known}) "
            "or LicenseRef-<name> for another license",
            {"known": ", ".join(SPDX_LICENSES)},
        )

    @model_validator(mode="after")
    def _shares_add_up(self) -> ContributorManifest:
        if self.contributors is None:
            return self
        if not self.contributors:
            raise PydanticCustomError(
                "contributors", "contributors must list at least one contributor when present"
            )
        seen: set[str] = set()
        for share in self.contributors:
            if share.id in seen:
                raise PydanticCustomError(
                    "contributors", "contributor id '{id}' appears more than once", {"id": share.id}
                )
            seen.add(share.id)
        total = math.fsum(share.weight for share in self.contributors)
        if abs(total - 1.0) > WEIGHT_SUM_TOLERANCE:
            raise PydanticCustomError(
                "contributors",
                "contributor weights must sum to 1; they sum to {total}",
                {"total": round(total, 9)},
            )
        return self


def parse_manifest(data: Any) -> ContributorManifest:
    """Validate a contributor manifest; the first problem is raised as InvalidInput."""
    if not isinstance(data, dict):
        raise InvalidInput("manifest: must be a JSON object")
    try:
        return ContributorManifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = _location(first["loc"])
        raise InvalidInput(
            f"manifest: {where}: {first['msg']}" if where else f"manifest: {first['msg']}"
        ) from None


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
