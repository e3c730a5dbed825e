"""The one Dagster Definitions object of the marketplace code location."""

from __future__ import annotations

import dagster as dg

defs = dg.Definitions(assets=[], sensors=[], asset_checks=[])
