"""Per-model evaluation schedules (spec §2.7, §3, §4.4): cron validation, writes, due selection.

Rules, also in the README:

- A cron expression is a standard 5-field expression (minute hour day-of-month month
  day-of-week) or one of croniter's `@hourly`-style aliases, evaluated in UTC. Anything croniter
  rejects, 6/7-field forms (seconds, years) and expressions that never fire (`0 0 31 2 *`) are
  `Unprocessable` (422).
- `next_run_at` is computed on every write that changes when the schedule fires: on create, on a
  PUT that changes the expression or re-enables the schedule. A disabled schedule has
  `next_run_at = null` (it is kept, not deleted), so due selection never sees it.
- `due_schedules` reads through the `(enabled, next_run_at)` index: its cost grows with the
  number of due schedules, not with the number of schedules.
- `advance` sets `last_run_at` to the firing time and `next_run_at` to the first cron time after
  it, so a schedule that missed many ticks (downtime) fires once, not once per missed tick.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from croniter import CroniterBadDateError, croniter
from sqlalchemy import func, select, true
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.core.errors import Conflict, NotFound, Unprocessable
from pipeline.core.tables import (
    BenchmarkSpec,
    DatasetVersion,
    EvaluationSchedule,
    isoformat_utc,
    utcnow,
)
from pipeline.core.text import END
from pipeline.models.registry import get_model

CRON_MAX_LENGTH = 200
CRON_ALIASES = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _any_case(word: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)


def _field(value: str) -> str:
    """A cron field: `*`, a value or a range, each with an optional step, comma-separated."""
    item = rf"(?:\*|{value}(?:-{value})?)(?:/[1-9][0-9]?)?"
    return rf"{item}(?:,{item})*"


_CRON_FIELDS = (
    r"[0-5]?[0-9]",  # minute
    r"(?:[01]?[0-9]|2[0-3])",  # hour
    r"(?:0?[1-9]|[12][0-9]|3[01])",  # day of month
    "(?:0?[1-9]|1[0-2]|" + "|".join(map(_any_case, _MONTHS)) + ")",  # month
    "(?:[0-7]|" + "|".join(map(_any_case, _DAYS)) + ")",  # day of week (0 and 7: Sunday)
)
# Standard cron as this service accepts it, one pattern for the validator and the OpenAPI
# document: 5 fields of numbers, names, ranges, lists and steps (1 to 99), or an alias, in any
# letter case, with spaces or tabs around and between the fields. croniter's extensions (`L`, `W`,
# `#`, `?`, `H`, seconds and year fields) are refused like any other invalid expression.
CRON_PATTERN = (
    r"^[ \t]*(?:"
    + r"[ \t]+".join(_field(value) for value in _CRON_FIELDS)
    + "|"
    + "|".join(_any_case(alias) for alias in sorted(CRON_ALIASES))
    + rf")[ \t]*{END}"
)
_CRON = re.compile(CRON_PATTERN)


def validate_cron(expression: str) -> str:
    """The normalised expression (single spaces); Unprocessable when it is not standard cron."""
    if len(expression) > CRON_MAX_LENGTH:
        raise Unprocessable(f"cron_expression is longer than {CRON_MAX_LENGTH} characters")
    text = " ".join(expression.split())
    if not text:
        raise Unprocessable("cron_expression must not be empty")
    if text.startswith("@"):
        if text.lower() not in CRON_ALIASES:
            raise Unprocessable(f"cron_expression {text!r}: unknown alias")
        text = text.lower()
    elif len(text.split(" ")) != 5:
        raise Unprocessable(
            f"cron_expression {text!r}: standard cron has 5 fields "
            "(minute hour day-of-month month day-of-week)"
        )
    if not _CRON.match(expression) or not croniter.is_valid(text):
        raise Unprocessable(f"cron_expression {text!r} is not a valid cron expression")
    # Valid syntax can still describe a time that never comes (February 31st).
    next_fire_time(text, datetime(2000, 1, 1, tzinfo=UTC))
    return text


def next_fire_time(expression: str, after: datetime) -> datetime:
    """The first time strictly after `after` at which `expression` fires (UTC)."""
    start = after.astimezone(UTC)
    try:
        fire: datetime = croniter(expression, start).get_next(datetime)
    except CroniterBadDateError:
        raise Unprocessable(f"cron_expression {expression!r} never fires") from None
    return fire.astimezone(UTC)


def schedule_view(schedule: EvaluationSchedule) -> dict[str, Any]:
    """The spec §2.7 body: ISO 8601 UTC times, `model_id` as a string."""
    return {
        "id": schedule.id,
        "model_id": str(schedule.model_id),
        "cron_expression": schedule.cron_expression,
        "enabled": schedule.enabled,
        "last_run_at": isoformat_utc(schedule.last_run_at),
        "next_run_at": isoformat_utc(schedule.next_run_at),
        "created_at": isoformat_utc(schedule.created_at),
        "updated_at": isoformat_utc(schedule.updated_at),
    }


def _schedule_of(session: Session, model_id: int) -> EvaluationSchedule | None:
    return session.scalar(select(EvaluationSchedule).where(EvaluationSchedule.model_id == model_id))


def get_schedule(session: Session, model_id: int) -> EvaluationSchedule:
    get_model(session, model_id)
    schedule = _schedule_of(session, model_id)
    if schedule is None:
        raise NotFound(f"model {model_id} has no evaluation schedule")
    return schedule


def create_schedule(
    session: Session,
    model_id: int,
    cron_expression: str,
    enabled: bool = True,
    now: datetime | None = None,
) -> EvaluationSchedule:
    """POST: NotFound (unknown model), Unprocessable (cron), Conflict (no spec, or exists)."""
    now = now or utcnow()
    get_model(session, model_id)
    expression = validate_cron(cron_expression)
    has_spec = session.scalar(
        select(func.count()).select_from(BenchmarkSpec).where(BenchmarkSpec.model_id == model_id)
    )
    if not has_spec:
        raise Conflict(
            f"model {model_id} has no benchmark specification; upload a benchmark dataset first"
        )
    if _schedule_of(session, model_id) is not None:
        raise Conflict(f"model {model_id} already has an evaluation schedule; use PUT to change it")
    schedule = EvaluationSchedule(
        model_id=model_id,
        cron_expression=expression,
        enabled=enabled,
        next_run_at=next_fire_time(expression, now) if enabled else None,
        created_at=now,
        updated_at=now,
    )
    try:
        with session.begin_nested():
            session.add(schedule)
    except IntegrityError:
        # A concurrent POST for the same model committed first (unique model_id).
        raise Conflict(f"model {model_id} already has an evaluation schedule") from None
    return schedule


def update_schedule(
    session: Session,
    model_id: int,
    cron_expression: str | None = None,
    enabled: bool | None = None,
    now: datetime | None = None,
) -> EvaluationSchedule:
    """PUT: NotFound when the model has no schedule (PUT never creates); omitted fields stay.

    `next_run_at` is recomputed from `now` when the expression changes or the schedule is
    re-enabled, kept when neither changes (a PUT does not skip a tick that is already due), and
    cleared when the schedule is disabled.
    """
    now = now or utcnow()
    schedule = get_schedule(session, model_id)
    expression = (
        validate_cron(cron_expression) if cron_expression is not None else schedule.cron_expression
    )
    new_enabled = schedule.enabled if enabled is None else enabled
    changed_when = expression != schedule.cron_expression or (new_enabled and not schedule.enabled)
    if not new_enabled:
        schedule.next_run_at = None
    elif changed_when or schedule.next_run_at is None:
        schedule.next_run_at = next_fire_time(expression, now)
    schedule.cron_expression = expression
    schedule.enabled = new_enabled
    schedule.updated_at = now
    session.flush()
    return schedule


def delete_schedule(session: Session, model_id: int) -> None:
    session.delete(get_schedule(session, model_id))
    session.flush()


def due_schedules(session: Session, now: datetime, limit: int) -> list[EvaluationSchedule]:
    """Enabled schedules whose `next_run_at` has come, oldest first, at most `limit`.

    The filter and order match the `(enabled, next_run_at)` index, so the database reads only
    the due rows (plus one), whatever the total number of schedules.
    """
    return list(
        session.scalars(
            select(EvaluationSchedule)
            .where(EvaluationSchedule.enabled == true(), EvaluationSchedule.next_run_at <= now)
            .order_by(EvaluationSchedule.next_run_at)
            .limit(limit)
        )
    )


def advance(schedule: EvaluationSchedule, fired_at: datetime) -> None:
    """Mark a schedule fired: the next run is the first cron time after `fired_at`.

    Computing from the firing time, not from the missed `next_run_at`, is what makes missed
    ticks after downtime run once rather than once per miss.
    """
    schedule.last_run_at = fired_at
    schedule.updated_at = fired_at
    try:
        schedule.next_run_at = next_fire_time(schedule.cron_expression, fired_at)
    except Unprocessable:
        schedule.next_run_at = None


def latest_versions(session: Session, model_ids: list[int]) -> dict[int, str]:
    """Each model's newest dataset version (highest version number), one query for all."""
    if not model_ids:
        return {}
    newest = (
        select(DatasetVersion.model_id, func.max(DatasetVersion.version_number).label("number"))
        .where(DatasetVersion.model_id.in_(model_ids))
        .group_by(DatasetVersion.model_id)
        .subquery()
    )
    # The outer filter repeats the model ids so both sides read through the model_id index.
    rows = session.execute(
        select(DatasetVersion.model_id, DatasetVersion.version)
        .join(
            newest,
            (DatasetVersion.model_id == newest.c.model_id)
            & (DatasetVersion.version_number == newest.c.number),
        )
        .where(DatasetVersion.model_id.in_(model_ids))
    )
    return {model_id: version for model_id, version in rows}


@dataclass(frozen=True)
class ScheduledRun:
    """One due schedule turned into an evaluation request."""

    model_id: int
    version: str | None  # the model's newest dataset version; None when it has none
    tick: datetime  # the scheduled time that was due
    run_key: str


def schedule_run_key(model_id: int, tick: datetime) -> str:
    """The run key of one schedule's tick. It is part of firing, not of Dagster: a firing
    that is not committed fires the same tick again, and only the same key lets the run
    launcher (whatever it is) see that it already asked for that run."""
    return f"schedule-{model_id}-{tick.astimezone(UTC):%Y%m%dT%H%M%SZ}"


def fire_due_schedules(session: Session, now: datetime, limit: int) -> list[ScheduledRun]:
    """Select due schedules, advance each, and say which run each one asks for.

    The caller commits; a tick that fails before the commit fires the same ticks again with the
    same run keys, which the run launcher deduplicates.
    """
    due = due_schedules(session, now, limit)
    versions = latest_versions(session, [s.model_id for s in due])
    runs = []
    for schedule in due:
        tick = schedule.next_run_at or now
        runs.append(
            ScheduledRun(
                model_id=schedule.model_id,
                version=versions.get(schedule.model_id),
                tick=tick,
                run_key=schedule_run_key(schedule.model_id, tick),
            )
        )
        advance(schedule, now)
    session.flush()
    return runs
