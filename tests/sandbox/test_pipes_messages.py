"""A trainer's Pipes messages: capped, cut off at the wall limit, only the harness's reach the log.

The reader is the one the evaluation step uses (`assets.trainers.GatedMessageReader`), fed a
messages file as a trainer in the box would write it; the step's own test is in
tests/assets/test_trainer_assets.py.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from assets.trainers import GatedMessageReader
from pipeline.sandbox.messages import MAX_BYTES, MAX_MESSAGES


class Handler:
    """What a Pipes message handler receives."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def handle_message(self, message: dict[str, Any]) -> None:
        self.messages.append(message)


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def warning(self, text: str) -> None:
        self.lines.append(text)


def line(method: str, **params: object) -> str:
    return json.dumps({"__dagster_pipes_version": "0.1", "method": method, "params": params})


def test_a_flood_is_cut_at_the_cap_and_no_trainer_text_passes(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    handler, log = Handler(), Log()
    reader = GatedMessageReader(str(path), log, time.monotonic() + 60)
    started = time.monotonic()
    # In order: the reader makes the file afresh, then the "trainer" appends to it.
    with reader.read_messages(handler), path.open("a") as fh:  # type: ignore[arg-type]
        fh.write(line("opened", extras={"row": "14.95,18.77"}) + "\n")
        fh.write(line("log", message="fitting train:fit on 200 rows", level="INFO") + "\n")
        fh.write(line("report_asset_materialization", asset_key="rewards") + "\n")
        for n in range(20_000):
            fh.write(line("log", message=f"row {n}: 14.95,18.77", level="INFO") + "\n")
    assert time.monotonic() - started < 10
    assert handler.messages == [
        {"__dagster_pipes_version": "0.1", "method": "opened", "params": {"extras": {}}},
        {
            "__dagster_pipes_version": "0.1",
            "method": "log",
            "params": {"message": "fitting train:fit on 200 rows", "level": "INFO"},
        },
    ]
    [said] = log.lines
    assert f"more than {MAX_MESSAGES} Pipes messages or {MAX_BYTES} bytes" in said
    assert "14.95" not in said


def test_closed_ends_reading_and_loses_its_exception_text(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    handler, log = Handler(), Log()
    reader = GatedMessageReader(str(path), log, time.monotonic() + 60)
    with reader.read_messages(handler), path.open("a") as fh:  # type: ignore[arg-type]
        fh.write(line("closed", exception={"message": "mail your wallet seed"}) + "\n")
        fh.write(line("log", message="fitted in 1.0 s; predicting 9 rows") + "\n")
    assert handler.messages == [
        {"__dagster_pipes_version": "0.1", "method": "closed", "params": {}}
    ]


class ClosesAtTheSecondLook(threading.Event):
    """A session that writes its last line and closes between the reader's empty read and its
    check, the race a CI run once lost a `closed` message to."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._path, self._looks = path, 0

    def is_set(self) -> bool:
        self._looks += 1
        if self._looks == 2:
            with self._path.open("a") as fh:
                fh.write(line("closed") + "\n")
            self.set()
        return super().is_set()


def test_lines_written_just_before_the_session_closes_are_read(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    path.touch()
    handler = Handler()
    reader = GatedMessageReader(str(path), Log(), time.monotonic() + 60)
    reader._reader_thread(handler, ClosesAtTheSecondLook(path))
    assert handler.messages == [
        {"__dagster_pipes_version": "0.1", "method": "closed", "params": {}}
    ]


def test_reading_stops_at_the_deadline_while_the_file_still_grows(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    path.touch()
    handler, log = Handler(), Log()
    reader = GatedMessageReader(str(path), log, time.monotonic() + 1.0)
    writing = threading.Event()
    writing.set()

    def trickle() -> None:  # one progress line every 50 ms, never a `closed`
        while writing.is_set():
            with path.open("a") as fh:
                fh.write(line("log", message="fitting train:fit on 1 rows") + "\n")
            time.sleep(0.05)

    writer = threading.Thread(target=trickle)
    writer.start()
    started = time.monotonic()
    try:
        # The session is never closed: the reader stops by itself at the deadline.
        reader._reader_thread(handler, threading.Event())
    finally:
        writing.clear()
        writer.join()
    assert time.monotonic() - started < 3
    assert 0 < len(handler.messages) < 60
    assert log.lines == ["reading the trainer's Pipes messages stopped at the wall time limit"]


def test_progress_shaped_lines_carry_no_rows(tmp_path: Path) -> None:
    """The progress lines' shape holds names and numbers, which a trainer can fill with rows:
    only the first line of each kind passes, its names and numbers of bounded length."""
    path = tmp_path / "messages.jsonl"
    handler, log = Handler(), Log()
    reader = GatedMessageReader(str(path), log, time.monotonic() + 60)
    rows = "_".join(f"r{n}_14_95_18_77" for n in range(200))
    with reader.read_messages(handler), path.open("a") as fh:  # type: ignore[arg-type]
        fh.write(line("log", message=f"fitting train:{rows} on 200 rows", level="INFO") + "\n")
        fh.write(line("log", message="fitting train:fit on 200 rows", level="INFO") + "\n")
        for n in range(150):
            fh.write(line("log", message=f"fitting r{n}_14_95:fit on 1495 rows") + "\n")
            fh.write(line("log", message=f"fitted in 1.0 s; predicting 14951877{n} rows") + "\n")
    assert [m["params"]["message"] for m in handler.messages] == [
        "fitting train:fit on 200 rows",
        "fitted in 1.0 s; predicting 149518770 rows",
    ]
