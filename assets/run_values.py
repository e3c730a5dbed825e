"""The IO manager of the evaluation assets: a step's value reaches the next steps of its run only.

Dagster's default IO manager pickles each output under its asset and partition, so a later run
that re-materializes a downstream asset alone loads whatever an earlier run left there: another
run's batch (its writes then went to that run), or nothing at all (`FileNotFoundError` for a
version processed inside another partition's run). Here values live in the run's own memory
(the steps share one process: `in_process_executor`); a step whose upstream did not run in this
run gets None and derives its work from the database for its own run
(`MarketplaceResource.run_batch`).
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import PrivateAttr

IO_MANAGER = "io_manager"


def _partition(context: dg.InputContext | dg.OutputContext) -> str | None:
    return context.asset_partition_key if context.has_asset_partitions else None


class RunScopedIOManager(dg.ConfigurableIOManager):
    """In-memory values keyed by run, asset and partition; None for a value of another run."""

    _values: dict[tuple[str, tuple[str, ...], str | None], Any] = PrivateAttr(default_factory=dict)

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        key = (context.run_id, tuple(context.asset_key.path), _partition(context))
        self._values[key] = obj

    def load_input(self, context: dg.InputContext) -> Any:
        run_id = context.step_context.run_id
        return self._values.get((run_id, tuple(context.asset_key.path), _partition(context)))
