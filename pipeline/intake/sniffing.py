"""Format sniffing: Parquet, CSV or neither, from a file's first bytes.

The format is decided by content, never by the file's name: Parquet starts with the magic
`PAR1`; anything else must be UTF-8 text without control bytes (the whole file is checked later:
`pipeline.store.csv_text`) that is not JSON. Used by the upload intake on the head it buffers
(`pipeline.intake.receiving`) and on complete files (`pipeline.intake.profiles.profile_path`).
"""

from __future__ import annotations

import codecs
import json
import re

from pipeline.core.errors import InvalidInput
from pipeline.store.formats import CSV, PARQUET, PARQUET_MAGIC, FileFormat
from pipeline.store.parquet_envelope import ENCRYPTED, ENCRYPTED_FOOTER_MAGIC

# The format is decided on the first bytes: at least this many (or the whole file) ...
HEAD_BYTES = 64 * 1024
# ... and for CSV up to a complete header line, which may not be longer than this.
MAX_HEAD_BYTES = 1024 * 1024
# Text files hold no control characters other than tab, newlines and form feed.
_CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0b\x0e-\x1f]")


def sniff_format(head: bytes, *, at_eof: bool) -> FileFormat:
    """Parquet or CSV from the first bytes; InvalidInput (400) for anything else."""
    if head.startswith(PARQUET_MAGIC):
        return PARQUET
    if head.startswith(ENCRYPTED_FOOTER_MAGIC) and _CONTROL_BYTES.search(head, 0, HEAD_BYTES):
        # Binary after `PARE` (a CSV header may start "PARENT,..."): an encrypted footer's file.
        raise InvalidInput(f"{ENCRYPTED} (its footer is encrypted)")
    if not head.strip():
        raise InvalidInput("the file is empty; expected CSV or Parquet")
    text = head[3:] if head.startswith(codecs.BOM_UTF8) else head
    if _CONTROL_BYTES.search(text, 0, HEAD_BYTES):
        raise InvalidInput("the file is neither CSV nor Parquet (binary content)")
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoded = decoder.decode(text, final=at_eof)
    except UnicodeDecodeError:
        raise InvalidInput("the file is neither Parquet nor UTF-8 CSV text") from None
    if _looks_like_json(decoded, at_eof=at_eof):
        raise InvalidInput("the file looks like JSON; expected CSV or Parquet")
    return CSV


# A JSON document cut by the end of the head fails this close to it (a number, a literal or a
# key cut short), or inside a string never closed.
_JSON_CUT_CHARS = 64


def _looks_like_json(text: str, *, at_eof: bool) -> bool:
    """Whether the head is JSON (an array, an object, or one object a line), not a CSV whose
    first column name starts with "[" or "{" (`[id]`): its first value must parse as JSON
    and end its line; a head that is not the whole file may cut that value short."""
    text = text.lstrip()
    if text[:1] not in ("{", "["):
        return False
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        if at_eof:
            return False
        return exc.msg.startswith("Unterminated string") or exc.pos >= len(text) - _JSON_CUT_CHARS
    rest = text[end:].lstrip(" \t")
    return rest[:1] in ("", "\n", "\r")
