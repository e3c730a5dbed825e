"""Why the owner's training code gave no usable predictions."""

from __future__ import annotations

# All a contributor is told of a failure of the model's training code: a fixed text. Whatever
# the trainer chose (its exception's class name and message, its stderr, which limit it hit,
# what its predictions looked like) could carry a message or rows of data to the contributor.
CONTRIBUTOR_TEXT = "the model's training code failed"


class TrainerFailed(Exception):
    """The owner's training code gave no usable predictions; never the contribution's fault.

    Every field is the owner's view (Dagster, `marketplace models list`), never a contributor's:
    a contributor's job reason says `CONTRIBUTOR_TEXT` only.

    - `summary`: the limit that struck, or the exception's type (a name the owner's code
      chose, so owner text);
    - `detail`: the summary with the exception's message and counts;
    - `stderr_tail`: the last lines of the trainer's stderr.
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
