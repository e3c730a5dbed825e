"""Running the owner's trainer: the runner interface, the plain subprocess runner, and the
trainer a scorer calls.

A `TrainerRunner` only starts a prepared run's command (`SandboxRun.command`, the launcher)
and waits for it; everything else — the run folder, the sandbox, the limits, reading and
checking what came back — is the same for every runner. The evaluation step in Dagster uses
the Pipes runner of `assets.trainers` (a `PipesSubprocessClient`, or a Kubernetes pod in
production); the CLI, tests and any caller outside Dagster use `SubprocessRunner`.
"""

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from pipeline.sandbox.errors import TrainerFailed
from pipeline.sandbox.outcome import TrainerOutput, read_outcome, stderr_tail
from pipeline.sandbox.predictions import check_labels, check_probabilities, check_values
from pipeline.sandbox.runs import SandboxLimits, SandboxRun, TrainerJob

if TYPE_CHECKING:
    import pandas as pd

# Beyond the launcher's own wall clock: the runner's last resort if the launcher hangs.
RUNNER_GRACE_SECONDS = 30


class TrainerRunner(Protocol):
    """Starts prepared runs. `run_root` is where their folders go (None: the temp folder);
    `isolation`, when set, replaces TRAINER_ISOLATION (a Kubernetes pod is its own sandbox)."""

    run_root: Path | None
    isolation: str | None

    def start(self, run: SandboxRun) -> None:
        """Run `run.command` to its end; its outcome is read from the run folder afterwards."""


class SubprocessRunner:
    """The launcher as a plain child process, with an environment of nothing but PATH."""

    run_root: Path | None = None
    isolation: str | None = None

    def start(self, run: SandboxRun) -> None:
        # On timeout, run() kills the launcher; bwrap's --die-with-parent takes the trainer.
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(
                run.command,
                env={"PATH": "/usr/bin:/bin"},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=run.limits.wall_seconds + RUNNER_GRACE_SECONDS,
                check=False,
            )


@dataclass(frozen=True)
class OwnerTrainer:
    """A model's training code (its folder, extracted) and how it is run."""

    folder: Path
    entry: str
    runner: TrainerRunner
    limits: SandboxLimits
    isolation: str
    # The stored folder's content hash: part of the "without" cache key (a new trainer is
    # another model).
    sha256: str = ""
    # The model's own environment (pipeline.sandbox.envs), unpacked on this host; None: the
    # service's packages.
    env: Path | None = None

    def predict(
        self,
        train: pd.DataFrame,
        features: pd.DataFrame,
        *,
        target: str,
        task_type: str,
        probabilities: bool,
        y_true: np.ndarray,
    ) -> TrainerOutput:
        """Fit on `train` in the sandbox and predict `features`, checked
        (`pipeline.sandbox.predictions`); TrainerFailed otherwise."""
        job = TrainerJob(
            self.folder, self.entry, target, train, features, probabilities, env=self.env
        )
        run = SandboxRun(
            job, self.limits, self.runner.isolation or self.isolation, root=self.runner.run_root
        )
        try:
            self.runner.start(run)
            output = read_outcome(run)
            rows = len(features)
            try:
                # The checks copy the arrays out of the run folder, after their shape is known.
                cpu = output.cpu_seconds
                if probabilities:
                    return TrainerOutput(
                        *check_probabilities(output, rows, y_true), cpu_seconds=cpu
                    )
                if task_type == "regression":
                    return TrainerOutput(check_values(output, rows), None, cpu)
                return TrainerOutput(check_labels(output, rows, y_true), None, cpu)
            except TrainerFailed as exc:
                exc.stderr_tail = stderr_tail(run.dir)
                raise
        finally:
            run.close()


__all__ = ["OwnerTrainer", "SubprocessRunner", "TrainerFailed", "TrainerRunner"]
