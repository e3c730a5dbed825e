"""Running one function in several threads at once, as several processes would race."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def run_together(
    work: Callable[[], T], count: int, timeout: float = 120
) -> tuple[list[T], list[BaseException]]:
    """`work()` in `count` threads started together: the results of those that returned and
    the exceptions of those that raised (a test asserts on both); a thread still running after
    `timeout` seconds (from the start) counts as a TimeoutError."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(work())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = sum(thread.is_alive() for thread in threads)
    errors += [TimeoutError(f"still running after {timeout} s")] * stuck
    return results, errors
