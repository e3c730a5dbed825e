"""Terminal output shared by the contributor subcommands: notes and progress bars on stderr.

Results go to stdout; everything said along the way (notes, retries, progress) goes to stderr,
so a command's output can be piped.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def note(message: str) -> None:
    stderr_console().print(message, markup=False)


def progress_bar(console: Console, *columns: Any) -> Progress:
    """A bar with a description and time remaining, plus the given columns between them."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        *columns,
        TimeRemainingColumn(),
        console=console,
    )
