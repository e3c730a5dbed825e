"""The owner's training code in a scoring step: fetched once, run in the sandbox, failures kept.

A model registered from a folder with a `trainer` is trained by that code, in the sandbox
(`pipeline.sandbox`), instead of a listed estimator. `StepTrainers` fetches each model's
folder from the object store once per step (checking its content hash), unpacks it, and
hands the scorer an `OwnerTrainer` with the step's runner (Pipes in Dagster, a plain
subprocess elsewhere) and, for a folder with requirements, its environment on this host.

When the code fails (`TrainerFailed`), it is never the contribution's fault: the batch's
contributions are given back (`pipeline.evaluation.leases.give_back`: `queued`, or `failed`
once given back twice) with a fixed reason, nothing is paid, and the owner's view of the
failure (reason and the last lines of stderr) is kept on the model (`record_trainer_failure`)
for `marketplace models list` and shown in Dagster.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import update

from pipeline.core.tables import Model, isoformat_utc, utcnow
from pipeline.evaluation.batches import VersionItem
from pipeline.evaluation.leases import give_back
from pipeline.evaluation.outcomes import EvaluationOutcome
from pipeline.sandbox.env_archives import ensure_environment
from pipeline.sandbox.errors import CONTRIBUTOR_TEXT, TrainerFailed
from pipeline.sandbox.folders import extracted, trainer_key
from pipeline.sandbox.runner import OwnerTrainer, SubprocessRunner, TrainerRunner
from pipeline.sandbox.runs import SandboxLimits, require_isolation

if TYPE_CHECKING:
    from pipeline.services import Services


class StepTrainers:
    """The trainers of one step's models, each folder fetched and unpacked once; close() at
    the end of the step."""

    def __init__(self, svc: Services, runner: TrainerRunner | None = None) -> None:
        self.svc = svc
        self.runner = runner or SubprocessRunner()
        self._stack = ExitStack()
        self._trainers: dict[int, OwnerTrainer | None] = {}

    def uses_trainer(self, model_id: int) -> bool:
        """Whether the model is trained by the owner's code (without fetching it)."""
        with self.svc.db.session() as session:
            model = session.get(Model, model_id)
            return model is not None and model.trainer is not None

    def for_model(self, model_id: int) -> OwnerTrainer | None:
        """The model's trainer; None for a model with a listed estimator."""
        if model_id not in self._trainers:
            self._trainers[model_id] = self._load(model_id)
        return self._trainers[model_id]

    def _load(self, model_id: int) -> OwnerTrainer | None:
        with self.svc.db.session() as session:
            model = session.get(Model, model_id)
            entry = model.trainer if model is not None else None
            sha256 = model.trainer_sha256 if model is not None else None
            env_key = model.trainer_env if model is not None else None
        if entry is None or sha256 is None:
            return None
        settings = self.svc.settings
        require_isolation(self.runner.isolation or settings.trainer_isolation)
        key = trainer_key(model_id, sha256)
        try:
            with self.svc.store.open(key) as fh:
                archive = fh.read()
        except Exception as exc:  # a missing key: OSError locally, ClientError on S3
            raise TrainerFailed(
                "the model's folder is missing from the object store",
                f"the model's folder {key} cannot be read: {type(exc).__name__}",
            ) from None
        if hashlib.sha256(archive).hexdigest() != sha256:
            raise TrainerFailed(
                "the model's stored folder does not match its hash",
                f"{key} does not match the hash registered with the model",
            )
        folder = self._stack.enter_context(extracted(archive))
        return OwnerTrainer(
            folder,
            entry,
            self.runner,
            SandboxLimits.from_settings(settings),
            settings.trainer_isolation,
            sha256,
            env=self._environment(env_key),
        )

    def _environment(self, key: str | None) -> Path | None:
        """The model's environment on this host (unpacked from its archive if need be; never
        installed): under the runner's run folders where they are shared with trainer pods."""
        if key is None:
            return None
        root = self.runner.run_root / "envs" if self.runner.run_root else self.svc.settings.envs_dir
        return ensure_environment(self.svc.store, root, key)

    def close(self) -> None:
        self._stack.close()


def give_back_batch(
    svc: Services, items: Sequence[VersionItem], exc: TrainerFailed
) -> dict[str, EvaluationOutcome]:
    """The batch's `evaluating` contributions given back after the trainer failed; outcomes
    by version. The job reason is a fixed text (`CONTRIBUTOR_TEXT`): neither the exception's
    name nor which limit struck, both of which the owner's code chooses; the outcome's detail
    and `trainer_failure` (Dagster, the model's row) are the owner's view."""
    why = f"not evaluated: {CONTRIBUTOR_TEXT}; not the contribution's fault, nothing charged"
    moved = give_back(svc.db, [item.contribution_id or "" for item in items], why)
    return {
        item.version: EvaluationOutcome(
            None,
            item.version,
            "contribution",
            status=moved.get(item.contribution_id or ""),
            detail=f"the model's training code failed: {exc.summary}",
            trainer_failure=exc.describe(),
        )
        for item in items
    }


def record_trainer_failure(svc: Services, model_id: int, failure: str | None) -> None:
    """Keep the owner's view of the trainer's last failure on the model; None clears it."""
    text = None if failure is None else f"{isoformat_utc(utcnow())}: {failure}"
    with svc.db.session() as session:
        session.execute(update(Model).where(Model.id == model_id).values(trainer_failure=text))
