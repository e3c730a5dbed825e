"""Reward tokens: wallet addresses, the reward formula and its split.

Contributor manifests (who is paid, `manifest.json`) are `pipeline.rewards.manifests`.

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

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from Crypto.Hash import keccak

from pipeline.core.errors import InvalidInput
from pipeline.core.text import END

TOKEN_DECIMALS = 6
_TOKEN_UNITS = 10**TOKEN_DECIMALS

# Row count at which the volume factor reaches 1.
FULL_VOLUME_ROWS = 10_000

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
