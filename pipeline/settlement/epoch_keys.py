"""Epoch keys: one epoch per week, named by the date of its Monday (UTC), as Dagster's weekly
partitions of the `settlement` asset are (`WeeklyPartitionsDefinition(day_offset=1)`)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from pipeline.core.errors import InvalidInput

EPOCH_DAYS = 7


def epoch_of(moment: datetime) -> str:
    """The key of the epoch holding `moment`: its week's Monday, e.g. `2026-12-07`."""
    day = moment.astimezone(UTC).date()
    return (day - timedelta(days=day.weekday())).isoformat()


def epoch_end(key: str) -> datetime:
    """When epoch `key` ends (the next Monday 00:00 UTC); ledger rows from then on go later."""
    try:
        start = date.fromisoformat(key)
    except ValueError:
        raise InvalidInput(f"epoch {key!r} is not a date (YYYY-MM-DD, a Monday)") from None
    if start.weekday() != 0:
        raise InvalidInput(f"epoch {key!r} is not a Monday")
    return datetime.combine(start + timedelta(days=EPOCH_DAYS), time(0), tzinfo=UTC)
