"""Why the owner's training code gave no usable predictions."""

from __future__ import annotations


class TrainerFailed(Exception):
    """The owner's training code gave no usable predictions; never the contribution's fault.

    - `summary`: the limit that struck or the exception's type — safe for a contributor's job
      reason (no data value, no owner text);
    - `detail`: the summary with the exception's message and counts — for the model's owner;
    - `stderr_tail`: the last lines of the trainer's stderr — for the owner (Dagster,
      `marketplace models list`), never for a contributor.
    """

    def __init__(self, summary: str, detail: str | None = None, stderr_tail: str = "") -> None:
        super().__init__(detail or summary)
        self.summary = summary
        self.detail = detail or summary
        self.stderr_tail = stderr_tail

    def describe(self) -> str:
        """The owner's view: what failed, then the last lines of the trainer's stderr."""
        if not self.stderr_tail:
            return self.detail
        return f"{self.detail}\nlast lines of the trainer's stderr:\n{self.stderr_tail}"


class SandboxUnavailable(TrainerFailed):
    """Owner code cannot run here: no bubblewrap, and no explicit permission to run without."""
