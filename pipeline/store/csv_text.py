"""CSV bytes a reader would misread: control bytes, and quotes RFC 4180 does not allow.

pyarrow's CSV reader, like Python's csv module, reads text RFC 4180 does not allow as something
its writer did not mean: a backslash before a quote (`"some \\"escaped\\" value"`, not an escape in
RFC 4180) ends the quoted value, and the text after it is glued to the value
(`some \\escaped\\" value"`); a quote never closed takes the rest of the file into one value. A NUL
byte is not text (PostgreSQL refuses it, C strings end at it). `CsvTextCheck` reads a file's bytes
in order, chunk by chunk, and raises `MalformedCsv` at the first such place, naming its line,
never its content. Every CSV the service reads meets it: the benchmark upload as its bytes arrive
(`pipeline.intake.receiving`), a complete file (`pipeline.intake.profiles.profile_path`), and the
pipeline's readability check (`pipeline.store.reading`).

What passes is what pyarrow, Python's csv module (`strict=True`, as the CLI reads) and Papa
Parse (the web form) read alike:

- a field that starts with `"` is quoted: it ends at a `"` followed by a comma, a line end or
  the end of the file, and a quote inside it is doubled (`""`); it may span lines;
- a `"` inside a field that does not start with one is an ordinary character (`12" pipe`);
- lines end with `\\n`, `\\r\\n` or a bare `\\r` (old Mac files);
- of the control bytes, only tab, line feed, form feed and carriage return (the rule the format
  sniffing applies to the first 64 KiB: `pipeline.intake.sniffing.sniff_format`).

Cost: a chunk without a quote costs two NumPy comparisons of its bytes (about 0.2 ms a MiB;
three more where it holds a control byte besides "\n": "\r\n" line ends, tabs); one with quotes
also has its quotes' neighbours checked with NumPy, assuming every quote belongs to a quoted
value (about 1 ms a MiB of text quoted in every row: `bench/csv_text.py`). A chunk where that
assumption fails (quotes inside unquoted fields, or an error) has its runs of quotes decided
together, in NumPy too (`_after_runs`): at worst, a quote every other byte, about 60 ms a MiB.
It was walked quote by quote in Python, 600 ms a MiB: a 500 MiB upload of `x"x"x"…` held a
thread for five minutes.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

import numpy as np

QUOTE = ord('"')
_LINE_FEED = ord("\n")
_CARRIAGE_RETURN = ord("\r")

# The bytes that may follow a closing quote or precede an opening one: a comma and line ends.
_BOUNDARY = np.zeros(256, dtype=np.bool_)
_BOUNDARY[[ord(","), _LINE_FEED, _CARRIAGE_RETURN]] = True

CHECK_CHUNK_BYTES = 1024 * 1024  # what `check_csv_file` reads at a time

# True, False, True, ...: whether the i-th quote of a chunk is outside a quoted value when the
# chunk starts outside one (sliced from 1 when it starts inside); longer chunks compute theirs.
_ALTERNATING = np.arange(2 * CHECK_CHUNK_BYTES + 1) % 2 == 0


def _outside(inside: int, count: int) -> np.ndarray:
    if inside + count <= _ALTERNATING.size:
        alternating: np.ndarray = _ALTERNATING[inside : inside + count]
    else:
        alternating = (np.arange(inside, inside + count) % 2) == 0
    return alternating


class MalformedCsv(ValueError):
    """The bytes are not CSV text the readers agree on; the message never quotes them."""


class CsvTextCheck:
    """Feed a CSV file's bytes in order (`feed`), then `finish` at its end; MalformedCsv at the
    first control byte or misplaced quote (see the module doc)."""

    def __init__(self) -> None:
        self._inside = False  # inside a quoted value (before the held run, if any)
        # A run of quotes that ended the last chunk is decided with the byte after it: its
        # length, and whether it follows a boundary (0: no run held).
        self._run = 0
        self._run_opens = False
        self._last = -1  # the last byte fed; -1: none yet (a field starts)
        self._offset = 0  # bytes fed so far
        self._line_feeds = 0  # line ends counted so far, for the line named in errors
        self._carriage_returns = 0

    def feed(self, data: bytes) -> None:
        if not data:
            return
        if self._offset == 0 and data.startswith(codecs.BOM_UTF8):
            data, self._offset = data[3:], 3
            if not data:
                return
        raw = np.frombuffer(data, dtype=np.uint8)
        feeds = int(np.count_nonzero(raw == _LINE_FEED))
        if np.count_nonzero(raw < 32) != feeds:  # a byte below 32 besides "\n": look closer
            self._check_controls(raw)
        if self._run or b'"' in data:  # a byte search: free where there is no quote
            self._check_quotes(raw)
        self._last = int(raw[-1])
        if not self._line_feeds:  # lines are counted by "\r" only in a file without "\n"
            self._carriage_returns += int(np.count_nonzero(raw == _CARRIAGE_RETURN))
        self._line_feeds += feeds
        self._offset += len(raw)

    def finish(self) -> None:
        """The end of the file: a quoted value must be closed by then."""
        if self._run:  # the end of the file is a boundary: the run needs no check
            self._inside = self._after_runs(
                np.array([self._run]), np.array([self._run_opens]), self._inside
            )[1][-1]
            self._run = 0
        if self._inside:
            raise MalformedCsv(
                "not a valid CSV file: a quoted value is not closed before the end of the file "
                '(a quote inside a quoted value is written twice: "")'
            )

    # Control bytes.

    def _check_controls(self, raw: np.ndarray) -> None:
        # 0-8, 11 (vertical tab) and 14-31; uint8 arithmetic wraps, so 14-31 is one comparison.
        shifted = raw - np.uint8(14)
        if not ((shifted < 18).any() or (raw < 9).any() or (raw == 11).any()):
            return
        bad = (shifted < 18) | (raw < 9) | (raw == 11)
        at = int(np.argmax(bad))
        raise MalformedCsv(
            "the file is neither CSV nor Parquet (binary content: byte "
            f"0x{int(raw[at]):02x} on line {self._line(raw, at)})"
        )

    # Quotes.

    def _check_quotes(self, raw: np.ndarray) -> None:
        """Every run of quotes of the chunk, decided at once (see `_after_runs`); first the
        cheaper test of the common case, where every quote belongs to a quoted value."""
        quotes = np.flatnonzero(raw == QUOTE)
        if not self._run and quotes[-1] != raw.size - 1 and self._all_quoted(raw, quotes):
            self._inside = bool((int(self._inside) + quotes.size) & 1)
            return
        quotes = quotes.astype(np.int32)  # a chunk is under 2 GiB
        first = np.empty(quotes.size, dtype=np.bool_)  # a run's first quote
        first[:1] = True
        np.not_equal(quotes[1:], quotes[:-1] + 1, out=first[1:])
        firsts = np.flatnonzero(first)
        starts = quotes[firsts]
        lengths = np.diff(firsts, append=quotes.size)
        ends = starts + lengths  # the byte after each run
        before = raw[starts - 1].astype(np.int16)  # starts[0] - 1 may be -1: set below
        if starts.size and starts[0] == 0:
            before[0] = self._last
        opens = (before < 0) | _BOUNDARY[before & 0xFF]
        if self._run:  # the run held from the last chunk: this chunk's first run goes on with it
            if starts.size and starts[0] == 0:
                lengths[0] += self._run
                opens[0] = self._run_opens
            else:
                lengths = np.insert(lengths, 0, self._run)
                opens = np.insert(opens, 0, self._run_opens)
                ends = np.insert(ends, 0, 0)
            self._run = 0
        if ends.size and ends[-1] == raw.size:  # decided by the next chunk's first byte
            self._run, self._run_opens = int(lengths[-1]), bool(opens[-1])
            lengths, opens, ends = lengths[:-1], opens[:-1], ends[:-1]
        if not lengths.size:
            return
        closes, states = self._after_runs(lengths, opens, self._inside)
        bad = closes & ~_BOUNDARY[raw[ends]]
        if bad.any():
            self._after_quote(raw, int(ends[np.argmax(bad)]))
        self._inside = bool(states[-1])

    def _all_quoted(self, raw: np.ndarray, quotes: np.ndarray) -> bool:
        """Whether the chunk is right if every quote in it belongs to a quoted value (called
        with no run of quotes held from the last chunk, none ending this one): then the quotes
        alternate between outside a value (an even count before) and inside one; a run of
        quotes that starts outside a value follows a boundary, one that ends outside a value is
        followed by one."""
        count = quotes.size
        outside = _outside(int(self._inside), count)
        before = raw[quotes - 1]  # quotes[0] - 1 may be -1 (the last byte): set below
        if quotes[0] == 0:
            before[0] = ord(",") if self._last < 0 else self._last  # none: a field starts
        opens = outside & (before != QUOTE)
        if (opens & ~_BOUNDARY[before]).any():
            return False
        inner = count - 1 if quotes[-1] == raw.size - 1 else count
        after = raw[quotes[:inner] + 1]
        closes = ~outside[:inner] & (after != QUOTE)
        return not (closes & ~_BOUNDARY[after]).any()

    @staticmethod
    def _after_runs(
        lengths: np.ndarray, opens: np.ndarray, inside: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """Which runs of quotes close a quoted value, and whether each run leaves one open.

        A run outside a value that follows a boundary opens one, and its other quotes are
        pairs inside it: it closes the value again when its length is even. A run outside a
        value after other text is that many literal quotes. A run inside a value closes it when
        its length is odd (pairs, then the closing quote). So each run maps the state before it
        to the state after it by one of three functions: swap (opens, odd), out (after text,
        odd: outside either way), or keep; the state before run k is the state after the last
        "out" run before it (outside), or the chunk's first state, flipped by each swap since.
        All NumPy: a chunk costs the same whatever its quotes are.
        """
        odd = (lengths & 1).astype(np.bool_)
        swap = opens & odd
        out = ~opens & odd
        swaps = np.cumsum(swap, dtype=np.int32)
        swaps_before = swaps - swap  # the swaps before run k
        if not out.any():  # the common case: no quote inside an unquoted field
            state = ((swaps_before + int(inside)) & 1).astype(np.bool_)
        else:
            # Before run k: the last "out" run before k, then the swaps since it.
            index = np.arange(lengths.size, dtype=np.int32)
            last_out = np.maximum.accumulate(np.where(out, index, -1))
            reset = np.concatenate(([-1], last_out[:-1]))
            since = swaps_before - np.where(reset >= 0, swaps[np.maximum(reset, 0)], 0)
            first = np.where(reset >= 0, 0, int(inside))
            state = ((first + since) & 1).astype(np.bool_)
        closes = (~state & opens & ~odd) | (state & odd)
        after = ~out & (state ^ swap)
        return closes, after

    def _after_quote(self, raw: np.ndarray, at: int) -> None:
        raise MalformedCsv(
            f"not a valid CSV file: on line {self._line(raw, at)}, a quoted value is followed "
            "by other text before the next comma or line end (a quote inside a quoted value is "
            'written twice: "", not \\")'
        )

    def _line(self, raw: np.ndarray, at: int) -> int:
        """The line of byte `at` of this chunk: line feeds before it, or carriage returns in a
        file without line feeds so far."""
        feeds = self._line_feeds + int(np.count_nonzero(raw[:at] == _LINE_FEED))
        if feeds:
            return feeds + 1
        return self._carriage_returns + int(np.count_nonzero(raw[:at] == _CARRIAGE_RETURN)) + 1


def check_csv_file(path: Path) -> None:
    """Check a complete CSV file (see the module doc); MalformedCsv at the first fault."""
    check = CsvTextCheck()
    for chunk in _chunks(path):
        check.feed(chunk)
    check.finish()


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(CHECK_CHUNK_BYTES):
            yield chunk
