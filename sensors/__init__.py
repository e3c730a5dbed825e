"""Dagster sensors: dataset arrivals (SQS or the embedded queue) and per-model schedules.

Exports used by `definitions.py`: SENSORS.
"""

from __future__ import annotations

from typing import Any

SENSORS: list[Any] = []
