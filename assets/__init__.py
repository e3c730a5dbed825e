"""Dagster assets: thin wrappers over `pipeline` functions.

Exports used by `definitions.py`: ASSETS, ASSET_CHECKS, JOBS, RESOURCES.
"""

from __future__ import annotations

from typing import Any

ASSETS: list[Any] = []
ASSET_CHECKS: list[Any] = []
JOBS: list[Any] = []
RESOURCES: dict[str, Any] = {}
