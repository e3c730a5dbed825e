"""Exact reward amounts: integer base units of the 18-decimal reward token, and their column type.

One token is 10**18 base units (the ERC-20 token's `decimals()`), so amounts exceed both 2**53
(a JSON number) and 2**63 (a 64-bit integer column). They are Python ints in the code, decimal
strings in API responses, `NUMERIC(78, 0)` on PostgreSQL (78 digits hold any uint256) and
decimal text on SQLite, whose own numbers are 64-bit integers or doubles.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from sqlalchemy import Numeric, String, TypeDecorator

TOKEN_UNIT_DECIMALS = 18
UNITS_PER_TOKEN = 10**TOKEN_UNIT_DECIMALS
# Digits of 2**256 - 1, the largest amount a uint256 holds.
UINT256_DIGITS = 78


def units_from_tokens(tokens: float) -> int:
    """The base units of a float amount of tokens, read from its decimal `repr`.

    `repr` is the shortest decimal that reads back as the same float, so 4.96125 becomes
    4961250000000000000 units rather than the binary float's 4961249999999999829...; the
    ledger's floats were rounded to millionths (`pipeline.rewards.formula`), which 18 decimals
    hold exactly. A repr with more than 18 decimals is rounded half to even.
    """
    if not math.isfinite(tokens) or tokens < 0:
        raise ValueError(f"a token amount must be a finite number not below 0, not {tokens!r}")
    units = (Decimal(repr(float(tokens))) * UNITS_PER_TOKEN).quantize(
        Decimal(1), rounding=ROUND_HALF_EVEN
    )
    return int(units)


def tokens_from_units(units: int) -> float:
    """The nearest float of an exact amount: for the float fields responses keep."""
    return float(Decimal(units) / UNITS_PER_TOKEN)


class TokenUnits(TypeDecorator[int]):
    """A non-negative integer of base units: NUMERIC(78, 0) on PostgreSQL, decimal text on
    SQLite (where NUMERIC would become a double above 2**63)."""

    impl = Numeric(UINT256_DIGITS, 0)
    cache_ok = True

    def load_dialect_impl(self, dialect: Any) -> Any:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(String(UINT256_DIGITS))
        return dialect.type_descriptor(Numeric(UINT256_DIGITS, 0))

    def process_bind_param(self, value: int | None, dialect: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"a token amount is a non-negative int of base units, not {value!r}")
        return str(value) if dialect.name == "sqlite" else Decimal(value)

    def process_result_value(self, value: Any, dialect: Any) -> int | None:
        if value is None:
            return None
        return int(value)
